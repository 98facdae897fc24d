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
from dataclasses import dataclass, field

import numpy as np

from pipeline.kernels import energy_curve
from pipeline.series.engine import host_samples
from pipeline.series.samples import AVERAGE_RANK, GpuSamples


@dataclass
class Curve:
    """A GPU's curve rows sorted by t_ns; ``has_next`` False where next_t_ns is NULL (a gap or the end)."""

    t_ns: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    next_t_ns: np.ndarray
    next_w: np.ndarray
    has_next: np.ndarray
    mine: np.ndarray
    """Rows of the source asked for by read_curve (all rows when none was)."""
    source_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    """Each row's source, as an index into ``source_names``."""
    source_names: list[str] = field(default_factory=list)
    is_average: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Rows whose source is a 1 s average."""

    def __len__(self) -> int:
        return len(self.t_ns)

    def _at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Index of the last sample at or before each t (-1: none), whether t lies strictly inside that
        sample's interval to a next sample, and the clipped offset (ns) into that interval."""
        i = np.searchsorted(self.t_ns, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = (i >= 0) & self.has_next[j] & (t > self.t_ns[j])
        d = np.minimum(t, self.next_t_ns[j]) - self.t_ns[j]
        return i, inside, d

    def energy_at(self, t: np.ndarray) -> np.ndarray:
        """E(t) (J) at each instant (ns): macro curve_energy_at of the sample at or before t, 0 before the first."""
        if not len(self):
            return np.zeros(len(t))
        i, inside, d = self._at(t)
        j = np.maximum(i, 0)
        p, nw, span = self.power_w[j], self.next_w[j], (self.next_t_ns[j] - self.t_ns[j])
        with np.errstate(invalid="ignore", divide="ignore"):
            ramp = self.energy_j[j] + (d / 1e9) * (p + (p + (nw - p) * d / span)) / 2
        return np.where(i < 0, 0.0, np.where(inside, ramp, self.energy_j[j]))

    def power_at(self, t: np.ndarray) -> np.ndarray:
        """P(t) (W): the sample's power at its instant, linear towards the next sample inside an
        interval, NaN elsewhere (before the first sample, after a sample without a next one)."""
        if not len(self):
            return np.full(len(t), np.nan)
        i, inside, d = self._at(t)
        j = np.maximum(i, 0)
        p, nw, span = self.power_w[j], self.next_w[j], (self.next_t_ns[j] - self.t_ns[j])
        with np.errstate(invalid="ignore", divide="ignore"):
            ramp = p + (nw - p) * d / span
        at_sample = (i >= 0) & (t == self.t_ns[j])
        return np.where(inside, ramp, np.where(at_sample, p, np.nan))

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
    its raw samples), sorted by t_ns; ``mine`` marks the rows of ``source``. The one place the
    per-sample curve is built."""
    c = energy_curve(s.t_ns.astype(np.int64), s.power_w, s.source_rank)
    t, linked = c["t_ns"], c["linked"]
    p = c["power_w"].astype(np.float32).astype(np.float64)  # the power as the table of samples stored it (FLOAT)
    first = c["first"]
    source_id = s.source_id[first].astype(np.uint8)
    names = list(s.sources)
    mine = np.ones(len(t), dtype=bool)
    if source is not None:
        mine = source_id == (names.index(source) if source in names else 255)
    return Curve(
        t_ns=t,
        power_w=p,
        energy_j=c["energy_j"],
        next_t_ns=np.where(linked, c["next_t_ns"], 0),
        next_w=np.where(linked, np.append(p[1:], np.nan), np.nan),
        has_next=linked,
        mine=mine,
        source_id=source_id,
        source_names=names,
        is_average=s.source_rank[first] == AVERAGE_RANK,
    )


def _no_samples(host: str, gpu: int) -> GpuSamples:
    none = np.zeros(0)
    return GpuSamples(host=host, gpu=gpu, sources=(), t_ns=none.astype(np.int64), power_w=none.astype(np.float32),
                      power_avg_w=none.astype(np.float32), has_avg=none.astype(bool), is_average=none.astype(bool),
                      source_id=none.astype(np.uint8), source_rank=none.astype(np.uint8))


def host_curves(con, host: str, gpus: Sequence[int] | None = None) -> Iterator[tuple[int, Curve]]:
    """Each GPU's curve (curve_of) of one host with samples that day (of ``gpus`` only, if given),
    in gpu order, from one read of the host's samples (engine.host_samples: one GPU in memory)."""
    for s in host_samples(con, host, gpus):
        yield s.gpu, curve_of(s)


def curves(con, wanted: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int, Curve]]:
    """The curves of the ``wanted`` (host, gpu), in (host, gpu) order, each host read once (not
    once per GPU: a host's files hold every GPU's rows); an empty curve for a GPU without
    samples. Memory: one GPU's samples and curve."""
    by_host: dict[str, list[int]] = {}
    for host, gpu in sorted(set(wanted)):
        by_host.setdefault(host, []).append(int(gpu))
    for host, gpus in by_host.items():
        found = host_curves(con, host, gpus)
        got = next(found, None)
        for gpu in gpus:
            if got is not None and got[0] == gpu:
                yield host, gpu, got[1]
                got = next(found, None)
            else:
                yield host, gpu, curve_of(_no_samples(host, gpu))


def read_curve(con, host: str, gpu: int, source: str | None = None) -> Curve:
    """One GPU's curve of the partition day (curve_of), ``mine`` marking the rows of ``source``;
    for a lookup of one GPU (a consumer of many GPUs reads them host by host: curves)."""
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
