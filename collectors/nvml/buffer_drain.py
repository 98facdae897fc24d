"""De-duplicate the driver's power sample buffer and detect overruns.

The buffer holds only ~2.4 s (~119 samples at ~20 ms); a drain that comes too late finds the
oldest returned sample well after the last one seen: that gap is an overrun, counted with an
estimate of the samples lost.
"""

from __future__ import annotations

DEFAULT_SPACING_US = 20_000


class BufferCursor:
    """Remembers the newest driver timestamp seen for one GPU."""

    def __init__(self, last_seen_us: int = 0) -> None:
        self.last_seen_us = last_seen_us
        self.spacing_us = DEFAULT_SPACING_US

    def accept(self, samples: list[tuple[int, float]]) -> tuple[list[tuple[int, float]], int, int]:
        """Keep samples newer than the cursor; return (new samples, overruns 0/1, samples lost estimate)."""
        new = [s for s in samples if s[0] > self.last_seen_us]
        if not new:
            return [], 0, 0
        if len(new) > 2:
            gaps = sorted(b[0] - a[0] for a, b in zip(new, new[1:], strict=False))
            self.spacing_us = max(1, gaps[len(gaps) // 2])
        overrun, lost = 0, 0
        if self.last_seen_us:
            gap = new[0][0] - self.last_seen_us
            if gap > 3 * self.spacing_us and gap > 50_000:
                overrun = 1
                lost = max(1, round(gap / self.spacing_us) - 1)
        self.last_seen_us = new[-1][0]
        return new, overrun, lost
