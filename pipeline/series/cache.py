"""Each GPU's energy curve as the engine pass built it, kept for the later steps of the same run.

Why: phase_segments, phase_intervals, swing_stats (and fleet_power_grid off the default step) need
a GPU's whole curve, one row per best-source sample (pipeline/phases/curve.py). Rebuilding it
means reading the host's raw files again, splitting them by GPU and sorting each GPU's samples:
on capture 4 tiled over 8 GPUs, more time than the steps' own work. The engine pass already
builds every curve (energy_curve's rows come from it), so it leaves each GPU's curve here, one
uncompressed Arrow IPC file per GPU that a reader maps (memory: the pages of the GPU it reads,
not the host's), and the run's readers take it from here instead of the raw files.

A cache belongs to one Dagster run (its run id): the samples it holds are the ones the run's
engine pass read. It is usable once sealed (every host of the cluster-day written), and removed
when the run ends (the runner calls :func:`drop`), when another run of this process opens one, when
the process ends, or, left by a killed run, by :func:`remove_stale`. A reader that finds no cache (a run that selected no series table) reads the
raw files as before. Nothing here knows Dagster: the run id comes from the caller.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.kernels import best_samples
from pipeline.series.samples import AVERAGE_RANK, GpuSamples

CURVE_SCHEMA = pa.schema([
    ("t_ns", pa.int64()),
    ("power_w", pa.float32()),
    ("energy_j", pa.float64()),
    ("linked", pa.bool_()),
    ("source_id", pa.uint8()),
    ("is_average", pa.bool_()),
])
"""One row per best-source sample (kernels.energy_curve): its power as the samples table stores it
(FLOAT: what phases and swings read; the energy is integrated from the unrounded means), whether
the next sample lies within the gap, its source (index into the host's source names), and whether
that source is a 1 s average."""

AVG_SCHEMA = pa.schema([("t_ns", pa.int64()), ("power_w", pa.float64())])
"""The GPU's 1 s-average trace: kernels.best_samples over the rows with a 1 s average (swing_stats'
avg1s series)."""

PREFIX = "curves-"
_MANIFEST = "manifest.json"
_OPEN: dict[str, Path] = {}
"""This process's caches by run id."""


class CurveCache:
    """A run's cache folder: ``<host>/curve-<gpu>.arrow`` and ``avg-<gpu>.arrow`` per GPU, and a
    manifest (written last) naming each host's source names and GPUs."""

    def __init__(self, folder: Path, hosts: dict[str, dict] | None = None) -> None:
        self.folder = folder
        self.hosts: dict[str, dict] = hosts if hosts is not None else {}

    def put(self, s: GpuSamples) -> None:
        """Write one GPU's curve (``s.curve``) and 1 s-average trace."""
        c = s.curve
        first = c["first"]
        entry = self.hosts.setdefault(s.host, {"sources": list(s.sources), "gpus": []})
        entry["gpus"].append(int(s.gpu))
        folder = self.folder / _safe(s.host)
        folder.mkdir(exist_ok=True)
        _write(folder / f"curve-{s.gpu}.arrow", pa.record_batch({
            "t_ns": c["t_ns"],
            "power_w": c["power_w"].astype(np.float32),
            "energy_j": c["energy_j"],
            "linked": c["linked"],
            "source_id": s.source_id[first].astype(np.uint8),
            "is_average": s.source_rank[first] == AVERAGE_RANK,
        }, schema=CURVE_SCHEMA))
        t, p, _ = best_samples(s.t_ns[s.has_avg], s.power_avg_w[s.has_avg], s.source_rank[s.has_avg])
        _write(folder / f"avg-{s.gpu}.arrow", pa.record_batch({"t_ns": t, "power_w": p}, schema=AVG_SCHEMA))

    def seal(self) -> None:
        """Mark the cache complete: every host of the cluster-day written (a host absent holds no sample)."""
        tmp = self.folder / f"{_MANIFEST}.tmp"
        tmp.write_text(json.dumps(self.hosts))
        tmp.rename(self.folder / _MANIFEST)

    def sources(self, host: str) -> list[str]:
        """The host's source names (GpuSamples.sources; empty for a host without samples)."""
        return list(self.hosts.get(host, {}).get("sources", []))

    def gpus(self, host: str) -> list[int]:
        """The host's GPUs with samples, in gpu order."""
        return sorted(self.hosts.get(host, {}).get("gpus", []))

    def curve(self, host: str, gpu: int) -> dict[str, np.ndarray] | None:
        """One GPU's curve columns (CURVE_SCHEMA) as arrays over the mapped file, None without samples."""
        return self._read(host, f"curve-{gpu}.arrow") if gpu in self.gpus(host) else None

    def avg(self, host: str, gpu: int) -> dict[str, np.ndarray] | None:
        """One GPU's 1 s-average trace (AVG_SCHEMA), None without samples."""
        return self._read(host, f"avg-{gpu}.arrow") if gpu in self.gpus(host) else None

    def _read(self, host: str, name: str) -> dict[str, np.ndarray]:
        # the map stays open while the arrays over it live (Arrow's buffers hold its region)
        table = pa.ipc.open_file(pa.memory_map(str(self.folder / _safe(host) / name))).read_all()
        return {n: table.column(n).to_numpy() for n in table.column_names}


def _safe(host: str) -> str:
    """A folder name for a host name (any string): its UTF-8 bytes in hex."""
    return host.encode().hex() or "-"


def _write(path: Path, batch: pa.RecordBatch) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def begin(run_id: str, parent: Path) -> CurveCache:
    """A new empty cache of run ``run_id`` under ``parent``, replacing the run's previous one (a
    retry of its pass) and removing the other runs' caches of this process (their steps are done:
    one run at a time per process)."""
    for other in list(_OPEN):
        drop(other)
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{run_id}-", dir=parent))
    _OPEN[run_id] = folder
    return CurveCache(folder)


def drop(run_id: str) -> None:
    """Remove run ``run_id``'s cache, if any."""
    folder = _OPEN.pop(run_id, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def of_run(run_id: str | None) -> CurveCache | None:
    """Run ``run_id``'s sealed cache, None when it has none (its pass did not run, failed or ended).
    Touched, so that another process's :func:`remove_stale` leaves a cache in use alone."""
    folder = _OPEN.get(run_id) if run_id else None
    if folder is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        hosts = json.loads((folder / _MANIFEST).read_text())
        os.utime(folder)
        return CurveCache(folder, hosts)
    return None


def remove_stale(parent: Path, older_than_s: float = 3600.0) -> list[Path]:
    """Delete cache folders under ``parent`` left by killed runs (not touched for an hour: a reader
    touches the cache it opens), not this process's own; returns them."""
    cutoff = time.time() - older_than_s
    mine = set(_OPEN.values())
    removed = []
    for folder in parent.glob(f"{PREFIX}*") if parent.exists() else []:
        with contextlib.suppress(FileNotFoundError):
            if folder.is_dir() and folder not in mine and folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


@atexit.register
def _drop_all() -> None:
    for run_id in list(_OPEN):
        drop(run_id)
