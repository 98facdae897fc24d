"""One GPU's energy curve as numpy arrays, rebuilt from its raw samples of the day, and E(t) / P(t)
at many instants by one sorted search: the phase assets' energy lookups, one GPU at a time.

Why: the stored table energy_curve holds E only at second boundaries (pipeline/series/energy.py); the SQL
macros (sql/views/power_energy.sql) answer one instant from it and the raw samples of that
second. A consumer with many instants on one GPU reads that GPU's samples once instead (the same
bytes a per-sample table held, without storing them twice) and integrates them with the kernel
that defines the table (kernels.energy_curve); every lookup is then a ``searchsorted``. The
arithmetic is the macro's, operation for operation, so energies agree to rounding."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from pipeline.kernels import energy_curve

SAMPLES_SQL = """
SELECT t_ns, power_w, source_rank::UTINYINT AS source_rank, list_position($sources, source)::UTINYINT AS source_id
FROM power_day_samples WHERE host = $host AND gpu = $gpu
"""
SOURCE_NAMES_SQL = """
SELECT DISTINCT source::VARCHAR FROM power_day_samples WHERE host = $host AND gpu = $gpu ORDER BY 1
"""


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


def gpu_samples(con, host: str, gpu: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """The GPU's raw samples of the partition day (view power_day_samples): t_ns, power_w,
    source_rank and source_id (1-based into the returned names: list_position)."""
    names = [n for (n,) in con.execute(SOURCE_NAMES_SQL, {"host": host, "gpu": gpu}).fetchall()]
    tab = con.sql(SAMPLES_SQL, params={"host": host, "gpu": gpu, "sources": names}).fetchnumpy()
    return {k: np.asarray(v) for k, v in tab.items()}, names


HOST_SAMPLES_SQL = """
SELECT gpu, t_ns, power_w, source_rank::UTINYINT AS source_rank, list_position($sources, source)::UTINYINT AS source_id
FROM power_day_samples WHERE host = $host
"""


def host_curves(con, host: str) -> Iterator[tuple[int, Curve]]:
    """Each GPU's curve (read_curve) of one host, in gpu order, from one read of the host's samples
    (a read per GPU would scan the host's files once per GPU: they hold every GPU's rows)."""
    names = [n for (n,) in con.execute("SELECT DISTINCT source::VARCHAR FROM power_day_samples WHERE host = ? ORDER BY 1", [host]).fetchall()]
    tab = {k: np.asarray(v) for k, v in con.sql(HOST_SAMPLES_SQL, params={"host": host, "sources": names}).fetchnumpy().items()}
    gpu = tab.pop("gpu")
    order = np.argsort(gpu, kind="stable")
    bounds = np.flatnonzero(np.r_[True, gpu[order][1:] != gpu[order][:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[lo:hi]
        yield int(gpu[rows[0]]), _curve({k: v[rows] for k, v in tab.items()}, names)


def read_curve(con, host: str, gpu: int, source: str | None = None) -> Curve:
    """The GPU's energy curve of the partition day, one row per best-source sample (kernels.energy_curve
    over its raw samples), sorted by t_ns; ``mine`` marks the rows of ``source``."""
    x, names = gpu_samples(con, host, gpu)
    return _curve(x, names, source)


def _curve(x: dict[str, np.ndarray], names: list[str], source: str | None = None) -> Curve:
    c = energy_curve(x["t_ns"].astype(np.int64), x["power_w"], x["source_rank"])
    t, linked = c["t_ns"], c["linked"]
    p = c["power_w"].astype(np.float32).astype(np.float64)  # the power as the table of samples stored it (FLOAT)
    source_id = x["source_id"][c["first"]].astype(np.uint8) - 1
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
        is_average=x["source_rank"][c["first"]] == 9,
    )


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
