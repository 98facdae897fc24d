"""Live power statistics from the samples as they arrive: sliding max/min/swing per window, time above
TDP, and a host's sum of GPUs on a common 20 ms grid. Pure (no NVML, no threads, no clock): the
sampler feeds driver timestamps in µs and watts; the metrics endpoint and the alerts read the results.

Windows are anchored at the newest sample, not at the wall clock: the window of W seconds at a sample
with driver timestamp ``t`` holds the samples with timestamps in ``(t − W, t]``. Each window keeps two
monotonic deques (the classic sliding-window maximum), so one sample costs O(1) amortised, never a
rescan.
"""

from __future__ import annotations

from collections import deque

WINDOWS_S = (2, 10, 60)
"""The windows exported and usable in alert rules (``swing_2s_w`` ...)."""

SLOT_US = 20_000
"""The host grid: the driver buffer's own ~20 ms spacing."""

HOLD_MAX_US = 250_000
"""A GPU's latest sample stands for its power at a slot end only if it is at most this old (a 20 ms
buffer trace, or the 100 ms field trace without the buffer); an older one means a gap: slot skipped."""

STALE_US = 5_000_000
"""A GPU whose newest sample lags the host's newest by more than this stops holding the host's
grid back (its slots are then skipped as incomplete until it reports again)."""

ABOVE_HOLD_MAX_US = 1_000_000
"""Time above TDP counts each sample as held until the next one, at most this long (a gap is not time)."""


class SlidingExtrema:
    """Max and min of the samples in ``(t − window, t]``, ``t`` the newest timestamp pushed.

    Timestamps must not decrease; a sample older than the newest one is ignored (returns False).
    """

    __slots__ = ("window_us", "_max", "_min", "last_ts")

    def __init__(self, window_us: int):
        self.window_us = int(window_us)
        self._max: deque = deque()  # (ts, w), values strictly decreasing from the left
        self._min: deque = deque()  # (ts, w), values strictly increasing from the left
        self.last_ts: int | None = None

    def push(self, ts_us: int, w: float) -> bool:
        last = self.last_ts
        if last is not None and ts_us < last:
            return False
        self.last_ts = ts_us
        mx, mn = self._max, self._min
        while mx and mx[-1][1] <= w:
            mx.pop()
        mx.append((ts_us, w))
        while mn and mn[-1][1] >= w:
            mn.pop()
        mn.append((ts_us, w))
        edge = ts_us - self.window_us
        while mx[0][0] <= edge:
            mx.popleft()
        while mn[0][0] <= edge:
            mn.popleft()
        return True

    @property
    def max(self) -> float | None:
        return self._max[0][1] if self._max else None

    @property
    def min(self) -> float | None:
        return self._min[0][1] if self._min else None

    @property
    def swing(self) -> float | None:
        return self._max[0][1] - self._min[0][1] if self._max else None


class PowerWindows:
    """One power series (a GPU's samples, or a host's grid sums): the extrema of every window in
    :data:`WINDOWS_S`, the newest sample, and the seconds spent above a threshold (TDP)."""

    __slots__ = ("windows", "last_ts", "last_w", "first_ts", "above_s", "threshold_w", "samples", "ignored")

    def __init__(self, windows_s=WINDOWS_S):
        self.windows = {w: SlidingExtrema(w * 1_000_000) for w in windows_s}
        self.last_ts: int | None = None
        self.last_w: float | None = None
        self.first_ts: int | None = None
        self.above_s = 0.0
        self.threshold_w: float | None = None
        self.samples = 0
        self.ignored = 0

    def push(self, ts_us: int, w: float) -> bool:
        last = self.last_ts
        if last is not None and ts_us <= last:
            self.ignored += 1  # an older or repeated timestamp: already counted
            return False
        if last is not None and self.threshold_w is not None and self.last_w > self.threshold_w:
            self.above_s += min(ts_us - last, ABOVE_HOLD_MAX_US) / 1e6
        for ext in self.windows.values():
            ext.push(ts_us, w)
        if self.first_ts is None:
            self.first_ts = ts_us
        self.last_ts, self.last_w = ts_us, w
        self.samples += 1
        return True

    def swing(self, window_s: int) -> float | None:
        return self.windows[window_s].swing


class HostGrid:
    """The sum of a host's GPUs on a common 20 ms grid, built as the samples arrive.

    Slot ``k`` ends at ``E = (k + 1) × 20 ms`` (driver time); its value is the sum over the GPUs of each
    GPU's latest sample with timestamp ≤ E (sample and hold), provided that sample is at most
    :data:`HOLD_MAX_US` old. A slot is computed once every GPU has reported a sample past E (then no
    later-arriving sample can change it), or once the GPUs that have not are stale (:data:`STALE_US`
    behind the newest); a slot where some GPU has no recent sample is skipped and counted
    (``incomplete_slots``), never summed over fewer GPUs. ``add`` returns the slots computed, as
    ``[(slot end µs, sum W)]``, oldest first.
    """

    def __init__(self, gpus):
        self.gpus = list(gpus)
        self.pending: dict = {g: deque() for g in self.gpus}  # samples not yet folded into a slot
        self.latest: dict = {g: None for g in self.gpus}  # newest timestamp seen per GPU
        self.held: dict = {g: None for g in self.gpus}  # (ts, w) folded so far
        self.next_end: int | None = None
        self.first_us: int | None = None  # the first sample any GPU reported
        self.incomplete_slots = 0

    def add(self, gpu, samples) -> list[tuple[int, float]]:
        """``samples``: [(ts µs, W)] of one GPU, oldest first (older than its newest: ignored)."""
        q = self.pending[gpu]
        newest = self.latest[gpu]
        for ts, w in samples:
            if newest is None or ts > newest:
                q.append((ts, w))
                newest = ts
        self.latest[gpu] = newest
        if self.first_us is None and q:
            self.first_us = q[0][0]
        return self._advance()

    def _advance(self) -> list[tuple[int, float]]:
        known = [t for t in self.latest.values() if t is not None]
        if not known:
            return []
        top = max(known)
        if len(known) < len(self.gpus) and top - self.first_us <= STALE_US:
            return []  # wait for every GPU's first samples (a GPU that never reports: like a stale one)
        watermark = min(t for t in known if t >= top - STALE_US)
        if self.next_end is None:
            first = max(min(q[0][0] for q in self.pending.values() if q) if any(self.pending.values()) else top,
                        top - 60_000_000)
            self.next_end = -(-first // SLOT_US) * SLOT_US  # the first slot end at or after it
        out = []
        end = self.next_end
        gpus, pending, held = self.gpus, self.pending, self.held
        while end <= watermark:
            total = 0.0
            complete = True
            for g in gpus:
                q = pending[g]
                while q and q[0][0] <= end:
                    held[g] = q.popleft()
                h = held[g]
                if h is None or end - h[0] > HOLD_MAX_US:
                    complete = False
                else:
                    total += h[1]
            if complete:
                out.append((end, total))
            else:
                self.incomplete_slots += 1
            end += SLOT_US
        self.next_end = end
        return out
