"""The energy counter is a cross-check, and a driver reload restarts it: never let that read as negative energy."""

from __future__ import annotations


class EnergyCounter:
    """Turn raw counter reads (J since driver load) into a series that never decreases.

    A drop to below half the last value is a restart (driver reload): the counter is continued
    from the last value (energy between the last read and the reload is unknown and not invented).
    A smaller drop is a glitch: the series holds its last value. Both are counted by the caller.
    """

    def __init__(self) -> None:
        self.last_raw_j: float | None = None
        self.offset_j = 0.0

    def update(self, raw_j: float) -> tuple[float, str | None]:
        """Return (monotonic energy J, event) where event is None, 'energy_resets' or 'energy_backwards'."""
        event = None
        last = self.last_raw_j
        if last is not None and raw_j < last:
            if raw_j < last / 2:
                self.offset_j += last
                event = "energy_resets"
            else:
                self.offset_j += last - raw_j
                event = "energy_backwards"
        self.last_raw_j = raw_j
        return raw_j + self.offset_j, event
