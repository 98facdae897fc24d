"""Support code of the phase assets (issue 8): the power grid they read, their checks."""
