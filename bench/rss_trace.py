"""What a run's resident memory is made of, step by step: `wattline ...` in this process, with
every table step's RSS at its start and end and its peak split into anonymous memory (heap,
allocator pools: only freeing gives it back) and file-backed pages (memory-mapped files: pages the
kernel may drop at will), sampled from /proc/self/status every few milliseconds, and at its end
what the process holds besides its code (``held``: Arrow's pool, the DuckDB memory of the connection
kept for the run's next step, glibc's heap in use and free): RSS beyond those is freed memory an
allocator keeps (DuckDB's jemalloc, Arrow's mimalloc: process_memory.release_pools).

    python -m bench.rss_trace OUT.jsonl -- run --date D --data-dir DIR --timings

One JSON line per step is appended to OUT.jsonl. Only for an in-process run (one cluster, or
``--workers 1``): worker processes are not traced.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
import traceback
from pathlib import Path

_STATUS = Path("/proc/self/status")
_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")


def status_mb() -> dict[str, float]:
    """/proc/self/status's RSS lines, MiB."""
    out = {}
    for line in _STATUS.read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in _KEYS:
            out[key] = int(line.split()[1]) / 1024
    return out


class Sampler:
    """The largest VmRSS seen while running, with its anonymous/file split at that moment, and the
    largest RssAnon and RssFile each on their own."""

    def __init__(self, every_s: float = 0.005) -> None:
        self.every_s = every_s
        self.peak: dict[str, float] = {}
        self.where: list[str] = []
        """The traced thread's innermost frames of ours when the peak was taken."""
        self._thread_id = threading.get_ident()
        self.max_anon = self.max_file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _take(self) -> None:
        s = status_mb()
        if s["VmRSS"] > self.peak.get("VmRSS", 0.0):
            if s["VmRSS"] > self.peak.get("VmRSS", 0.0) + 8:
                frame = sys._current_frames().get(self._thread_id)
                stack = traceback.extract_stack(frame) if frame is not None else []
                self.where = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in stack
                              if "/pipeline/" in f.filename or "/collectors/" in f.filename][-4:]
            self.peak = s
        self.max_anon = max(self.max_anon, s["RssAnon"])
        self.max_file = max(self.max_file, s["RssFile"])

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def __enter__(self) -> Sampler:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def held_mb() -> dict[str, float | None]:
    """What the process holds besides its code, MiB: Arrow's pool (allocated, and its backend),
    the DuckDB buffer memory of the compute connection kept for the run's next step, glibc's heap
    (in use, free but kept, and in own mappings)."""
    import pyarrow as pa

    from pipeline import warehouse

    out: dict = {"arrow_mb": pa.total_allocated_bytes() / 2**20, "arrow_pool": pa.default_memory_pool().backend_name}
    kept = warehouse._kept
    try:
        out["duckdb_kept_mb"] = kept.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] / 2**20 if kept else None
    except Exception:  # noqa: BLE001 - busy or closed: unknown
        out["duckdb_kept_mb"] = None
    try:
        mi = ctypes.CDLL(None).mallinfo2
        mi.restype = _Mallinfo2
        m = mi()
        out.update(heap_used_mb=m.uordblks / 2**20, heap_free_mb=m.fordblks / 2**20, heap_mmap_mb=m.hblkhd / 2**20)
    except (OSError, AttributeError):
        pass
    return out


def main() -> None:
    out = Path(sys.argv[1])
    argv = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    from pipeline import tables
    from pipeline.cli import main as cli_main

    compute = tables.Table.compute

    def traced(self, context, *args, **kwargs):  # type: ignore[no-untyped-def]
        start = status_mb()
        cpu0 = time.process_time()
        with Sampler() as sampler:
            result = compute(self, context, *args, **kwargs)
        end = status_mb()
        held = held_mb()
        row = {"step": context.op_def.name, "start": start, "end": end, "peak": sampler.peak,
               "where": sampler.where, "held": held, "max_anon_mb": sampler.max_anon, "max_file_mb": sampler.max_file,
               "cpu_s": round(time.process_time() - cpu0, 2)}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return result

    tables.Table.compute = traced  # type: ignore[method-assign]
    sys.argv = ["wattline", *argv]
    cli_main()


if __name__ == "__main__":
    main()
