"""Sample GPUs on absolute deadlines, survive every NVML error, leave honest gaps.

One thread samples all GPUs (each wake-up costs CPU: 154 µs on the sandboxed H200 host, so one thread per
GPU would multiply it). A GPU whose NVML call stalls must not hold the others back, so a watchdog
(:meth:`SamplerLoop.split_stalled`, called by the main thread) moves the other GPUs to a new loop
thread when a call has been blocked longer than ``stall_split_s``; the stuck GPU keeps its own
thread from then on. NVML calls are ctypes calls and release the GIL while they block.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from collectors.nvml.buffer_drain import BufferCursor
from collectors.nvml.counters import Counters
from collectors.nvml.energy import EnergyCounter
from collectors.nvml.nvml_source import SLOW_READS, describe_error, error_name
from collectors.nvml.rows import BUFFER, FIELD, RowBuffer

log = logging.getLogger("wattline.collect")

_NO_SLOW = (None, None, None, None, None)


@dataclass(frozen=True)
class SamplingConfig:
    interval_s: float = 0.1
    slow_s: float = 1.0
    energy_s: float = 30.0
    buffer: bool = True
    buffer_s: float = 1.0
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    slow_call_s: float = 1.0
    """A tick whose NVML calls take longer than this is counted as a stalled call."""
    stall_split_s: float = 0.25
    """A call blocked this long moves the other GPUs to a new sampler thread (watchdog period too)."""


class GpuSampler:
    """One GPU's sampling state and its tick; driven by a :class:`SamplerLoop` thread."""

    def __init__(self, reader, cfg: SamplingConfig, out: RowBuffer, counters: Counters, buffer_since_us: int = 0,
                 live=None):
        self.reader = reader
        self.live = live  # collectors.nvml.metrics.LiveMetrics, or None (no endpoint, no alerts)
        self.gpu = reader.index
        self.cfg = cfg
        self.out = out
        self.counters = counters
        self.cursor = BufferCursor(buffer_since_us)
        self.energy = EnergyCounter()
        self.disabled: set[str] = set()
        self.null_logged: set[str] = set()
        self.backoff_s = 0.0
        now = time.monotonic()
        self.next_slow = self.next_energy = self.next_drain = now
        # Not opened yet (or failed at start): the first tick opens it.
        self.failed_since: float | None = now if reader.handle is None else None
        self.retry_at = now

    def guarded_tick(self, final: bool = False) -> None:
        """One tick that never raises: errors become counters, a log line, a gap and a retry time."""
        now = time.monotonic()
        if self.failed_since is not None:
            if now < self.retry_at:
                return
            try:
                self.reader.reopen()
            except Exception as exc:
                self._fail(exc, now)
                return
            if self.live is not None:
                self.live.set_uuid(self.gpu, self.reader.uuid)
        t0 = time.perf_counter()
        try:
            self._tick(now, final)
        except Exception as exc:  # NVMLError subclasses and anything unexpected: never kill the thread
            self._fail(exc, now)
            return
        took = time.perf_counter() - t0
        if took > self.cfg.slow_call_s:
            self.counters.add_gpu(self.gpu, "stalled_calls")
            log.warning("gpu %d: NVML calls took %.2f s (stalled); its ticks were skipped meanwhile", self.gpu, took)
        if self.failed_since is not None:
            gap = now - self.failed_since
            self.counters.add_gpu(self.gpu, "recoveries")
            self.counters.add_gpu(self.gpu, "gap_s", gap)
            self.counters.set_gpu_state(self.gpu, "ok")
            log.warning("gpu %d: recovered after a %.1f s gap", self.gpu, gap)
            self.failed_since = None
            self.backoff_s = 0.0

    def _fail(self, exc: BaseException, now: float) -> None:
        name = error_name(exc)
        self.counters.add_gpu(self.gpu, f"errors_{name}")
        self.backoff_s = min(max(self.backoff_s * 2, self.cfg.backoff_min_s), self.cfg.backoff_max_s)
        self.retry_at = now + self.backoff_s
        if self.failed_since is None:
            self.failed_since = now
            self.counters.set_gpu_state(self.gpu, f"error:{name}")
            log.error("gpu %d: %s; gap in its trace, retrying with backoff (other GPUs keep sampling)",
                      self.gpu, describe_error(exc))

    # -- one tick -------------------------------------------------------------------------------
    def _tick(self, now: float, final: bool = False) -> None:
        r = self.reader
        ts_ns, inst_w, avg_w = r.read_fast()
        if inst_w is None or avg_w is None:
            self._null_power(inst_w, avg_w)
        slow = _NO_SLOW
        if now >= self.next_slow:
            slow = tuple(None if col in self.disabled else self._optional(col, getattr(r, meth))
                         for col, meth in SLOW_READS)
            self.next_slow = _advance(self.next_slow, self.cfg.slow_s, now)
        energy_j = None
        if (final or now >= self.next_energy) and "energy_j" not in self.disabled:
            raw = self._optional("energy_j", r.read_energy_j)
            if raw is not None:
                energy_j, event = self.energy.update(raw)
                if event:
                    self.counters.add_gpu(self.gpu, event)
                    log.warning("gpu %d: energy counter went backwards (%s); series continued, not negative",
                                self.gpu, event)
            self.next_energy = _advance(self.next_energy, self.cfg.energy_s, now)
        self.out.append((ts_ns, self.gpu, inst_w, avg_w, energy_j, *slow, FIELD))
        live = self.live
        if live is not None:
            self._live(live.on_field, self.gpu, ts_ns, inst_w, avg_w, energy_j, slow[4])
        if self.cfg.buffer and (final or now >= self.next_drain) and "buffer" not in self.disabled:
            samples = self._optional("buffer", r.read_buffer, self.cursor.last_seen_us)
            if samples:
                new, overrun, lost = self.cursor.accept(samples)
                if overrun:
                    self.counters.add_gpu(self.gpu, "buffer_overruns")
                    self.counters.add_gpu(self.gpu, "buffer_samples_lost_est", lost)
                gpu = self.gpu
                self.out.extend([(ts_us * 1000, gpu, w, None, None, None, None, None, None, None, BUFFER)
                                 for ts_us, w in new])
                if live is not None and new:
                    self._live(live.on_buffer, gpu, new)
            self.next_drain = _advance(self.next_drain, self.cfg.buffer_s, now)

    def _live(self, fn, *args) -> None:
        """Feed the live metrics; a bug there must never read as a GPU failure or leave a gap in the
        rows: counted (``live_errors``) and logged once."""
        try:
            fn(*args)
        except Exception as exc:
            self.counters.add("live_errors")
            if "live" not in self.null_logged:
                self.null_logged.add("live")
                log.exception("live metrics failed on gpu %d (%s); sampling and Parquet unaffected", self.gpu, exc)

    def _null_power(self, inst_w, avg_w) -> None:
        """Field 186/185 not returned (NOT_SUPPORTED or another per-field status): the row keeps a null;
        counted per row, logged once per column."""
        for col, value in (("power_w", inst_w), ("power_avg_w", avg_w)):
            if value is None:
                self.counters.add_gpu(self.gpu, f"null_{col}")
                if col not in self.null_logged:
                    self.null_logged.add(col)
                    log.warning("gpu %d: the driver returned no %s field; rows keep it null (counted as null_%s)",
                                self.gpu, col, col)

    def _optional(self, what: str, fn, *args):
        """A read this GPU may not support: NOT_SUPPORTED disables it (logged once); other errors propagate."""
        try:
            return fn(*args)
        except Exception as exc:
            if error_name(exc) != "NotSupported":
                raise
            self.disabled.add(what)
            if what == "buffer" and self.live is not None:
                self.live.buffer_off(self.gpu)
            self.counters.add_gpu(self.gpu, f"not_supported_{what}")
            log.warning("gpu %d: %s not supported (%s); recorded as null from now on", self.gpu, what,
                        describe_error(exc))
            return None


def _advance(deadline: float, period: float, now: float) -> float:
    """Next absolute deadline on the grid; after a stall, the first grid point after now."""
    deadline += period
    if deadline <= now:
        deadline += (int((now - deadline) / period) + 1) * period
    return deadline


class SamplerLoop(threading.Thread):
    """Ticks a set of GPUs on absolute deadlines (``start + k × interval``: no drift)."""

    _count = 0

    def __init__(self, samplers: list[GpuSampler], cfg: SamplingConfig, counters: Counters,
                 stop: threading.Event, start_at: float | None = None):
        SamplerLoop._count += 1
        super().__init__(name=f"sampler-{SamplerLoop._count}", daemon=True)
        self.samplers = list(samplers)
        self.cfg = cfg
        self.counters = counters
        self.stop_event = stop
        self.start_at = start_at
        self.busy: tuple[GpuSampler, float] | None = None  # the GPU whose tick is running, since when

    def run(self) -> None:
        cfg = self.cfg
        if self.start_at is None:
            self.start_at = time.monotonic()
        next_tick = self.start_at
        stop = self.stop_event
        while not stop.is_set():
            delay = next_tick - time.monotonic()
            if delay > 0:
                # time.sleep, not Event.wait: fewer syscalls per wake-up; stop latency ≤ 0.5 s is fine
                time.sleep(min(delay, 0.5))
                continue
            self._tick_all()
            next_tick += cfg.interval_s
            late = time.monotonic() - next_tick
            if late >= cfg.interval_s:  # a stall: skip the ticks we cannot make up, stay on the grid
                missed = int(late / cfg.interval_s)
                next_tick += missed * cfg.interval_s
                for s in self.samplers:
                    self.counters.add_gpu(s.gpu, "missed_ticks", missed)
        for s in self.samplers:  # last energy read and buffer drain, so the final interval is covered
            if s.failed_since is None:
                s.guarded_tick(final=True)

    def _tick_all(self) -> None:
        for s in self.samplers[:]:
            if s not in self.samplers:  # moved to another loop by split_stalled while we were blocked
                continue
            self.busy = (s, time.monotonic())
            s.guarded_tick()
            self.busy = None

    def split_stalled(self, now: float, stall_s: float) -> SamplerLoop | None:
        """If this loop is blocked on one GPU for > stall_s, keep only that GPU here and return a new
        loop (not started) for the others, on the same tick grid."""
        busy = self.busy
        if busy is None or now - busy[1] <= stall_s or len(self.samplers) < 2:
            return None
        stuck = busy[0]
        others = [s for s in self.samplers if s is not stuck]
        self.samplers = [stuck]
        self.counters.add_gpu(stuck.gpu, "isolated_after_stall")
        log.warning("gpu %d: NVML call blocked for %.2f s; moving GPUs %s to a new sampler thread",
                    stuck.gpu, now - busy[1], [s.gpu for s in others])
        grid = self.cfg.interval_s
        origin = self.start_at if self.start_at is not None else now
        return SamplerLoop(others, self.cfg, self.counters, self.stop_event,
                           start_at=origin + (int((now - origin) / grid) + 1) * grid)
