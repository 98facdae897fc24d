"""The collector process: start one sampler per GPU, flush on a fixed cadence, stop cleanly on a signal.

Exit codes: 0 after a clean stop with everything written; 1 if rows could not be written at the
end (disk still failing; counted and logged); 2 when NVML is unusable (raised as NvmlUnavailable).
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from collectors.names import check_path_name, inside_key
from collectors.nvml.compact import compact_power
from collectors.nvml.counters import Counters, status_json, summary_line, write_status
from collectors.nvml.flusher import Flusher
from collectors.nvml.gpu_sampler import GpuSampler, SamplerLoop, SamplingConfig
from collectors.nvml.nvml_source import GpuReader, NvmlUnavailable, describe_error, load_nvml
from collectors.nvml.resume import prepare
from collectors.nvml.rows import RowBuffer, rows_to_table
from collectors.storage import DataRoot

log = logging.getLogger("wattline.collect")


@dataclass
class CollectorConfig:
    data_dir: Path | str
    """A local folder or an ``s3://bucket/prefix`` URL."""
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    gpus: list[int] | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    flush_s: float = 10.0
    status_s: float = 60.0
    compact: bool = True
    compact_every_s: float = 300.0
    max_pending_rows: int = 1_000_000
    nvml_module: str | None = None
    duration_s: float | None = None
    """Stop by itself after this long (benchmarks, tests); None: run until a signal."""
    metrics_listen: tuple[str, int] | None = None
    """(address, port) of the Prometheus endpoint; None: no endpoint."""
    alerts: object | None = None
    """A validated :class:`collectors.nvml.alerts.AlertsFile`, or None."""
    host_info: object | None = None
    """:class:`collectors.nvml.metrics.HostInfo` from ``--inventory`` (labels, TDP, provisioned power)."""


class StartError(RuntimeError):
    """The collector cannot start as asked (e.g. the metrics port is in use): one line for the user."""


def status_key(host: str) -> str:
    return inside_key("collector", f"{check_path_name(host, 'host')}.status.json")


def status_path(data_dir: Path, host: str) -> Path:
    return Path(data_dir) / status_key(host)


class Collector:
    def __init__(self, cfg: CollectorConfig, stop: threading.Event | None = None):
        self.cfg = cfg
        self.root = DataRoot.open(cfg.data_dir)
        self.stop = stop or threading.Event()
        self.counters = Counters()
        self.rows = RowBuffer()
        self.flusher = Flusher(self.root, cfg.host, self.counters, cfg.max_pending_rows)
        self.samplers: list[GpuSampler] = []
        self.loops: list[SamplerLoop] = []
        self.live = None
        self.server = None
        self.notifier = None

    def open(self) -> None:
        nvml = load_nvml(self.cfg.nvml_module)
        self.nvml = nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            raise NvmlUnavailable(f"NVML cannot count GPUs: {describe_error(exc)}") from None
        indices = list(range(count)) if self.cfg.gpus is None else self.cfg.gpus
        unknown = [i for i in indices if not 0 <= i < count]
        if unknown or not indices:
            raise NvmlUnavailable(f"no such GPU index {unknown or '(none)'}: this machine has {count} GPU(s)")
        resume = prepare(self.root, self.cfg.host)
        for i in indices:
            reader = GpuReader(nvml, i)
            try:
                reader.reopen()
            except Exception as exc:  # the sampler retries it with backoff
                log.error("gpu %d: cannot open (%s); will retry", i, describe_error(exc))
            self.samplers.append(GpuSampler(reader, self.cfg.sampling, self.rows, self.counters,
                                            buffer_since_us=resume.get(i, 0)))
        if self.cfg.metrics_listen or self.cfg.alerts:
            self._start_live(indices)
        log.info("collecting GPUs %s on host %s into %s (interval %.3f s, buffer %s, flush every %.0f s)",
                 indices, self.cfg.host, self.cfg.data_dir, self.cfg.sampling.interval_s,
                 "on" if self.cfg.sampling.buffer else "off", self.cfg.flush_s)

    def _start_live(self, indices: list[int]) -> None:
        """Live statistics for the endpoint and the alerts; binds the endpoint (StartError if it cannot)."""
        # imported here, not at the top: without these options the collector needs only pyarrow,
        # click and pynvml (prometheus-client, pydantic and pyyaml stay optional on a GPU host)
        from collectors.nvml.alerts import AlertEngine, WebhookNotifier
        from collectors.nvml.metrics import LiveMetrics, serve

        cfg = self.cfg
        engine = None
        if cfg.alerts is not None:
            if cfg.alerts.webhook is not None:
                self.notifier = WebhookNotifier(cfg.alerts.webhook)
            engine = AlertEngine(cfg.alerts, self.notifier)
        self.live = LiveMetrics(cfg.host, indices, cfg.host_info, engine, buffer=cfg.sampling.buffer)
        for s in self.samplers:
            s.live = self.live
            self.live.set_uuid(s.gpu, s.reader.uuid)
        if cfg.metrics_listen:
            addr, port = cfg.metrics_listen
            try:
                self.server = serve(self.live, addr, port)
            except OSError as exc:
                raise StartError(f"--metrics-listen {addr}:{port}: cannot listen there ({exc.strerror or exc})") from None
            log.info("metrics on http://%s:%d/metrics", addr if ":" not in addr else f"[{addr}]", port)
        if self.notifier is not None:
            self.notifier.start()

    def uuids(self) -> dict[int, str]:
        return {s.gpu: s.reader.uuid for s in self.samplers}

    def flush(self) -> bool:
        rows = self.rows.take()
        if rows:
            self.flusher.add(rows_to_table(rows, self.cfg.host, self.uuids()))
        ok = self.flusher.flush()
        self.write_status()
        return ok

    def snapshot(self) -> dict:
        snap = self.counters.snapshot()
        snap["counters"]["rows_pending"] = self.flusher.pending_rows + len(self.rows)
        snap["host"] = self.cfg.host
        return snap

    def write_status(self) -> None:
        if self.root.is_local:
            ok = write_status(status_path(self.cfg.data_dir, self.cfg.host), self.snapshot())
        else:
            try:
                self.root.write_bytes(status_key(self.cfg.host), status_json(self.snapshot()).encode())
                ok = True
            except OSError:
                ok = False
        if not ok:
            self.counters.add("status_write_errors")

    def maybe_compact(self) -> None:
        try:
            res = compact_power(self.root, self.cfg.host, min_age_s=2 * self.cfg.flush_s + 30)
        except Exception as exc:  # disk full during a merge: sources are untouched, try again later
            self.counters.add("compaction_errors")
            log.error("compaction failed (%s); sources kept, will retry", exc)
            return
        if res.hours:
            self.counters.add("hours_compacted", res.hours)
            log.info("compacted %d hour(s): %d files → %d", res.hours, res.files_in, len(res.paths))

    def run(self) -> int:
        cfg = self.cfg
        self.loops = [SamplerLoop(self.samplers, cfg.sampling, self.counters, self.stop)]
        self.loops[0].start()
        start = time.monotonic()
        end = start + cfg.duration_s if cfg.duration_s else None
        next_flush = start + cfg.flush_s
        next_status = start + cfg.status_s
        next_compact = start + min(cfg.compact_every_s, 60.0)
        watch_s = cfg.sampling.stall_split_s if len(self.samplers) > 1 else float("inf")
        while True:
            wake = min(next_flush, end or next_flush, time.monotonic() + watch_s)
            if self.stop.wait(max(0.0, wake - time.monotonic())):
                break
            now = time.monotonic()
            if end and now >= end:
                break
            self.watchdog(now)
            if now >= next_flush:
                self.flush()
                next_flush += cfg.flush_s
                if next_flush <= now:
                    next_flush = now + cfg.flush_s
            if now >= next_status:
                log.info(summary_line(self.snapshot()))
                next_status = now + cfg.status_s
            if cfg.compact and now >= next_compact:
                self.maybe_compact()
                next_compact = now + cfg.compact_every_s
        return self.shutdown()

    def watchdog(self, now: float) -> None:
        """Move GPUs away from a loop that is blocked in one GPU's NVML call."""
        for loop in list(self.loops):
            new = loop.split_stalled(now, self.cfg.sampling.stall_split_s)
            if new is not None:
                self.loops.append(new)
                new.start()

    def shutdown(self) -> int:
        self.stop.set()
        deadline = time.monotonic() + max(5.0, 2 * self.cfg.sampling.slow_call_s)
        for loop in self.loops:
            loop.join(timeout=max(0.1, deadline - time.monotonic()))
        ok = self.flush()
        if self.notifier is not None:
            self.notifier.stop()
        if self.server is not None:
            from collectors.nvml.metrics import stop

            stop(*self.server)
        snap = self.snapshot()
        log.info("stopped; " + summary_line(snap))
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
        if not ok:
            log.error("exiting with %d rows that could not be written", self.flusher.pending_rows)
            return 1
        return 0


def _lean_memory() -> None:
    """A long-running daemon should hand memory back: Arrow's system allocator instead of its
    caching one, and at most 2 glibc malloc arenas (one per thread otherwise)."""
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(-8, 2)  # M_ARENA_MAX
    except Exception:
        pass
    try:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
    except Exception:
        pass


def run_collector(cfg: CollectorConfig) -> int:
    """Open NVML, install SIGTERM/SIGINT handlers, collect until stopped; returns the exit code."""
    _lean_memory()
    collector = Collector(cfg)
    collector.open()  # NvmlUnavailable, StartError propagate: the CLI prints them as one line, exit 2

    def _stop(signum, _frame):
        log.info("signal %d: flushing and stopping", signum)
        collector.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    return collector.run()
