"""The process's peak resident memory over one step (Linux): which asset sets a run's peak RSS.

The kernel keeps a high-water mark of the process's RSS (VmHWM in /proc/self/status); writing 5
to /proc/self/clear_refs resets it to the current RSS. Elsewhere (or where /proc cannot be
written) the peak is unknown: None.

return_freed_memory() makes glibc give large freed blocks back to the OS: what set the peak RSS
of a 64-GPU cluster-day was freed numpy arrays the heap kept, not DuckDB. reused_heap() lifts that
setting while the series pass runs, whose sample-sized temporaries it made page-fault cost.

release_pools() makes DuckDB's and Arrow's allocators give back what they keep freed: after a
step, DuckDB's jemalloc and Arrow's mimalloc keep the memory the step freed (duckdb_memory() and
pa.total_allocated_bytes() say 0 while the process holds hundreds of MB), and the next step's peak
sits on top of it."""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of this size and more get their own mapping, unmapped when freed."""


def reset_peak() -> None:
    """Start a new high-water mark at the current RSS (no-op where unsupported)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


def peak_mb() -> float | None:
    """The RSS high-water mark since the last reset (MiB), None where unknown."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None


@functools.cache
def return_freed_memory() -> bool:
    """Serve every allocation of MMAP_THRESHOLD_BYTES or more from its own mapping (glibc mallopt),
    so a freed array goes back to the OS at once. glibc's threshold otherwise rises to the size of
    the last large block freed (up to 32 MiB): the kernels' per-GPU arrays (1–30 MB) then come from
    the heap, and a freed one stays in the process while a later block holds the heap up. At 64
    GPU-days power_100ms alone peaked at 2.98 GB RSS with DuckDB held to 1 GB, and at 2.16 GB with
    this; at 8 GPUs x 24 h, with release_pools, the whole run peaked at 903 MB without it and 880 MB
    with it (docs/benchmarks.md). Once per process; False where it is not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


_GLIBC_TRIM_THRESHOLD_BYTES = 128 * 1024
"""glibc's default M_TRIM_THRESHOLD (fixed once M_MMAP_THRESHOLD is set, as return_freed_memory does)."""
HEAP_REUSE_BYTES = 1 << 30
"""reused_heap's mmap and trim thresholds: the series pass's arrays (up to ~40 MB a GPU-day) come from the heap."""


@contextlib.contextmanager
def reused_heap() -> Iterator[None]:
    """Inside: glibc serves the series pass's large numpy arrays from its heap and keeps freed ones for
    the next (mallopt); after: every freed page given back (malloc_trim) and the process's own
    setting again (return_freed_memory: blocks of 1 MiB and more mapped apart).

    Why: a GPU's kernels make dozens of temporaries the size of its samples, each freed a moment
    later. Mapped apart, each was a fresh mapping, faulted in page by page and unmapped at free:
    8 GPUs x 24 h of capture 4, 617 000 page faults and 4.7 s system CPU in a pass of 10.6 s;
    inside, 71 000 and 1.9 s (docs/benchmarks.md). Without return_freed_memory's setting glibc's own
    threshold stops at 32 MiB: a 6 h tile's arrays (10 MB) were reused, a 24 h tile's (40 MB)
    not, which is why the pass grew faster than its samples in bench/series_pass.py. A no-op
    where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        yield
        return
    mallopt(_M_MMAP_THRESHOLD, HEAP_REUSE_BYTES)
    mallopt(_M_TRIM_THRESHOLD, HEAP_REUSE_BYTES)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD_BYTES)
        trim(0)


_ALL_ARENAS = b"arena.4096.purge"  # jemalloc's MALLCTL_ARENAS_ALL: every arena


@functools.cache
def _duckdb_mallctl():
    """mallctl of the jemalloc inside DuckDB's Python module (its symbols are prefixed ``duckdb_je_``);
    None where DuckDB is built without it (macOS, Windows) or the symbol is not exported."""
    try:
        import _duckdb

        mallctl = ctypes.CDLL(_duckdb.__file__).duckdb_je_mallctl
    except (ImportError, OSError, AttributeError):
        return None
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    mallctl.restype = ctypes.c_int
    return mallctl


def release_pools() -> None:
    """Give the memory DuckDB's and Arrow's allocators keep after freeing back to the OS, once, when
    a step is done with its connection: DuckDB (jemalloc) frees a query's hash tables and sorts into
    its arenas and purges them only past allocator_bulk_deallocation_flush_threshold (512 MiB), Arrow's
    mimalloc pool never by itself. One purge costs a few tens of ms; purging on every free instead
    (that threshold at 0) cost ~1.2 s of CPU in fleet_power_100ms' query alone, memory freed and
    faulted in again within a query."""
    mallctl = _duckdb_mallctl()
    if mallctl is not None:
        mallctl(_ALL_ARENAS, None, None, None, 0)
    pa.default_memory_pool().release_unused()
