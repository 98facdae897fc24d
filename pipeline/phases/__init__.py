"""Support code of the phase assets (issue 8): their checks."""
