"""Support code of the phase assets: their checks."""
