"""One GPU's energy curve as numpy arrays, rebuilt from its raw samples of the day, and E(t) / P(t)
at many instants by one sorted search: the phase assets' energy lookups, one GPU at a time.

Why: the stored table energy_curve holds E only at second boundaries (pipeline/series/energy.py); the SQL
macros (sql/views/power_energy.sql) answer one instant from it and the raw samples of that
second. A consumer with many instants on one GPU reads that GPU's samples once instead (the same
bytes a per-sample table held, without storing them twice) and integrates them with the kernel
that defines the table (kernels.energy_curve); every lookup is then a ``searchsorted``. The
arithmetic is the macro's, operation for operation, so energies agree to rounding."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Literal

import numpy as np

from pipeline.kernels import best_samples
from pipeline.series.cache import CurveCache
from pipeline.series.energy import curve_at
from pipeline.series.engine import host_samples
from pipeline.series.samples import AVERAGE_RANK, GpuSamples
from pipeline.series_run import run_curves


class Curve:
    """A GPU's curve rows sorted by t_ns; ``has_next`` False where next_t_ns is NULL (a gap or the end).

    Only the columns a reader uses are built: the power in double (``power_w``, from the stored
    FLOAT ``power_w32``), the next sample's instant and power (``next_t_ns``, ``next_w``) and
    ``mine`` are computed on first use and kept, so a reader of instants and power alone (the
    swings) holds no day-sized copies it never reads."""

    def __init__(self, t_ns: np.ndarray, power_w: np.ndarray | None = None, energy_j: np.ndarray | None = None,
                 next_t_ns: np.ndarray | None = None, next_w: np.ndarray | None = None, has_next: np.ndarray | None = None,
                 mine: np.ndarray | None = None, source_id: np.ndarray | None = None, source_names: list[str] | None = None,
                 is_average: np.ndarray | None = None, avg_t_ns: np.ndarray | None = None, avg_w: np.ndarray | None = None,
                 power_w32: np.ndarray | None = None) -> None:
        assert power_w is not None or power_w32 is not None, "a curve needs its power"
        assert energy_j is not None and has_next is not None
        self.t_ns = t_ns
        self.power_w32 = power_w32 if power_w32 is not None else np.asarray(power_w).astype(np.float32)
        """The power as the table of samples stored it (FLOAT)."""
        self._power_w = power_w
        self._power_is_32 = power_w is None  # power_w, where built, is power_w32 widened: the same values
        self.energy_j = energy_j
        self._next_t_ns = next_t_ns
        self._next_w = next_w
        self.has_next = has_next
        self._mine = mine
        self.source_id = source_id if source_id is not None else np.zeros(0, np.uint8)
        """Each row's source, as an index into ``source_names``."""
        self.source_names = source_names if source_names is not None else []
        self.is_average = is_average if is_average is not None else np.zeros(0, bool)
        """Rows whose source is a 1 s average."""
        self.avg_t_ns = avg_t_ns if avg_t_ns is not None else np.zeros(0, np.int64)
        self.avg_w = avg_w if avg_w is not None else np.zeros(0)
        """The GPU's 1 s-average trace (kernels.best_samples over its rows with a 1 s average), where
        asked for (host_curves' ``with_avg``): swing_stats' avg1s series."""

    @property
    def power_w(self) -> np.ndarray:
        """Each row's power (W) in double."""
        if self._power_w is None:
            self._power_w = self.power_w32.astype(np.float64)
        return self._power_w

    @property
    def power_w_narrowest(self) -> np.ndarray:
        """The power at its narrowest exact width: ``power_w32`` where the curve was given its power
        as FLOAT (every curve built from samples or taken from the run's cache), else ``power_w``.
        Why: its order statistics are power_w's values with half the bytes to partition (the
        detector's levels: power_detect.gpu_levels)."""
        return self.power_w32 if self._power_is_32 else self.power_w

    @property
    def next_t_ns(self) -> np.ndarray:
        """The next row's instant where has_next, else 0."""
        if self._next_t_ns is None:
            t = self.t_ns
            out = np.zeros(len(t), dtype=np.int64)
            out[:-1] = t[1:]
            out[~self.has_next] = 0
            self._next_t_ns = out
        return self._next_t_ns

    @property
    def next_w(self) -> np.ndarray:
        """The next row's power (W) where has_next, else NaN."""
        if self._next_w is None:
            out = np.full(len(self.t_ns), np.nan)
            out[:-1] = self.power_w32[1:]
            out[~self.has_next] = np.nan
            self._next_w = out
        return self._next_w

    @property
    def mine(self) -> np.ndarray:
        """Rows of the source asked for by read_curve (all rows when none was)."""
        if self._mine is None:
            self._mine = np.ones(len(self.t_ns), dtype=bool)
        return self._mine

    @mine.setter
    def mine(self, rows: np.ndarray) -> None:
        self._mine = rows

    def next_gaps_ns(self, rows: np.ndarray) -> np.ndarray:
        """next_t_ns − t_ns at the ``rows`` (a mask) that have a next sample, without building next_t_ns."""
        at = rows & self.has_next
        if not len(at):
            return np.zeros(0, dtype=np.int64)
        gaps = np.diff(self.t_ns)[at[:-1]]
        return np.append(gaps, -self.t_ns[-1]) if at[-1] else gaps  # a last row marked linked: next_t_ns 0

    def __len__(self) -> int:
        return len(self.t_ns)

    def energy_at(self, t: np.ndarray) -> np.ndarray:
        """E(t) (J) at each instant (ns): macro curve_energy_at of the sample at or before t, 0 before the first."""
        if not len(self):
            return np.zeros(len(t))
        return curve_at(self.t_ns, self.power_w, self.energy_j, self.has_next, t)[0]

    def power_at(self, t: np.ndarray) -> np.ndarray:
        """P(t) (W): the sample's power at its instant, linear towards the next sample inside an
        interval, NaN elsewhere (before the first sample, after a sample without a next one)."""
        if not len(self):
            return np.full(len(t), np.nan)
        return curve_at(self.t_ns, self.power_w, self.energy_j, self.has_next, t)[1]

    def energy_power_at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`energy_at` and :meth:`power_at` of the same instants, from one sorted search."""
        if not len(self):
            return np.zeros(len(t)), np.full(len(t), np.nan)
        energy, power, _ = curve_at(self.t_ns, self.power_w, self.energy_j, self.has_next, t)
        return energy, power

    def peak_in(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The highest sample power with lo <= t_ns < hi for each [lo, hi) (NaN where none)."""
        a = np.searchsorted(self.t_ns, lo, side="left")
        b = np.searchsorted(self.t_ns, hi, side="left")
        out = np.full(len(lo), np.nan)
        if len(lo) == 0 or not len(self):
            return out
        # maximum.reduceat over the interleaved bounds [a0, b0, a1, b1, ...]: every other result is
        # max(vals[a_k:b_k]); one -inf appended so b_k = n is a valid index
        vals = np.append(self.power_w, -np.inf)
        red = np.maximum.reduceat(vals, np.column_stack([a, b]).ravel())[::2]
        return np.where(b > a, red, out)


def curve_of(s: GpuSamples, source: str | None = None) -> Curve:
    """The GPU's energy curve of the day, one row per best-source sample (kernels.energy_curve over
    its raw samples, GpuSamples.curve), sorted by t_ns; ``mine`` marks the rows of ``source``."""
    c = s.curve
    first = c["first"]
    return _curve(c["t_ns"], c["power_w"].astype(np.float32), c["energy_j"], c["linked"], s.source_id[first].astype(np.uint8),
                  s.source_rank[first] == AVERAGE_RANK, list(s.sources), source)


def _curve(t: np.ndarray, p32: np.ndarray, energy: np.ndarray, linked: np.ndarray, source_id: np.ndarray, is_average: np.ndarray,
           names: list[str], source: str | None) -> Curve:
    """A Curve from the curve's columns (``p32``: the power as the table of samples stored it, FLOAT),
    built from the samples (curve_of) or taken from the run's cache (pipeline/series/cache.py)."""
    mine = None  # every row: built where read (Curve.mine)
    if source is not None:
        mine = source_id == (names.index(source) if source in names else 255)
    return Curve(
        t_ns=t,
        power_w32=p32,
        energy_j=energy,
        has_next=linked,
        mine=mine,
        source_id=source_id,
        source_names=names,
        is_average=is_average,
    )


def _cached(cache: CurveCache, host: str, gpu: int, source: str | None = None, with_avg: bool = False) -> Curve | None:
    """GPU ``gpu``'s curve from the run's cache, None where it has no samples."""
    c = cache.curve(host, gpu)
    if c is None:
        return None
    out = _curve(c["t_ns"], c["power_w"], c["energy_j"], c["linked"], c["source_id"], c["is_average"], cache.sources(host), source)
    if with_avg:
        a = cache.avg(host, gpu)
        assert a is not None
        out.avg_t_ns, out.avg_w = a["t_ns"], a["power_w"]
    return out


def _no_samples(host: str, gpu: int) -> GpuSamples:
    none = np.zeros(0)
    return GpuSamples(host=host, gpu=gpu, sources=(), t_ns=none.astype(np.int64), power_w=none.astype(np.float32),
                      power_avg_w=none.astype(np.float32), has_avg=none.astype(bool), is_average=none.astype(bool),
                      source_id=none.astype(np.uint8), source_rank=none.astype(np.uint8))


RUN: Final = "run"
"""``cache=RUN``: the curves of the Dagster run executing in this thread (series_run.run_curves)."""


def host_curves(con, host: str, gpus: Sequence[int] | None = None, with_avg: bool = False,
                cache: CurveCache | None | Literal["run"] = RUN) -> Iterator[tuple[int, Curve]]:
    """Each GPU's curve (curve_of) of one host with samples that day (of ``gpus`` only, if given),
    in gpu order: from the run's cache where the run's engine pass left one, else from one read of
    the host's samples (engine.host_samples). One GPU in memory. ``with_avg``: each curve carries
    the GPU's 1 s-average trace too (Curve.avg_t_ns, avg_w). ``cache``: the run's (looked up in
    this thread's Dagster context), or one looked up beforehand by code whose generator runs in
    another thread (a streamed Python table's, in DuckDB's), None: none."""
    if isinstance(cache, str):
        cache = run_curves()
    if cache is not None:
        for gpu in sorted(set(cache.gpus(host)) & ({int(g) for g in gpus} if gpus is not None else set(cache.gpus(host)))):
            c = _cached(cache, host, gpu, with_avg=with_avg)
            assert c is not None
            yield gpu, c
            del c  # before the next GPU's is built: one curve alive
        return
    for s in host_samples(con, host, gpus):
        c = curve_of(s)
        if with_avg:
            c.avg_t_ns, c.avg_w, _ = best_samples(s.t_ns[s.has_avg], s.power_avg_w[s.has_avg], s.source_rank[s.has_avg])
        gpu = s.gpu
        del s  # the samples, before the next GPU's are read
        yield gpu, c
        del c


def curves(con, wanted: Iterable[tuple[str, int]], cache: CurveCache | None | Literal["run"] = RUN) -> Iterator[tuple[str, int, Curve]]:
    """The curves of the ``wanted`` (host, gpu), in (host, gpu) order, each host read once (not
    once per GPU: a host's files hold every GPU's rows); an empty curve for a GPU without
    samples. Memory: one GPU's samples and curve, provided the caller too drops the curve it was
    handed before asking for the next (the generator drops its own references first). ``cache``:
    as host_curves'."""
    by_host: dict[str, list[int]] = {}
    for host, gpu in sorted(set(wanted)):
        by_host.setdefault(host, []).append(int(gpu))
    for host, gpus in by_host.items():
        found = host_curves(con, host, gpus, cache=cache)
        got = next(found, None)
        for gpu in gpus:
            if got is not None and got[0] == gpu:
                c, got = got[1], None
                yield host, gpu, c
                del c  # before the next curve is built
                got = next(found, None)
            else:
                yield host, gpu, curve_of(_no_samples(host, gpu))


def read_curve(con, host: str, gpu: int, source: str | None = None) -> Curve:
    """One GPU's curve of the partition day (curve_of), ``mine`` marking the rows of ``source``;
    for a lookup of one GPU (a consumer of many GPUs reads them host by host: curves)."""
    cache = run_curves()
    if cache is not None:
        c = _cached(cache, host, gpu, source)
        return c if c is not None else curve_of(_no_samples(host, gpu), source)
    for s in host_samples(con, host, [gpu]):
        return curve_of(s, source)
    return curve_of(_no_samples(host, gpu), source)


def curve_sources(c: Curve) -> list[tuple[str, int, bool]]:
    """The sources of a curve's rows: (source, samples, is_average), most samples first."""
    out = []
    for i, name in enumerate(c.source_names):
        rows = c.source_id == i
        if rows.any():
            out.append((name, int(rows.sum()), bool(c.is_average[rows].any())))
    return sorted(out, key=lambda r: (-r[1], r[0]))


def sources(con, host: str, gpu: int) -> list[tuple[str, int, bool]]:
    """The GPU's sources in its curve that day: (source, samples, is_average), most samples first."""
    return curve_sources(read_curve(con, host, gpu))
