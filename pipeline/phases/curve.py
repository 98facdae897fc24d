"""One GPU's energy curve (energy_curve, sql/energy_curve/) as numpy arrays, and E(t) / P(t) at many
instants by one sorted search: the phase assets' energy lookups, one GPU at a time.

Why: the SQL macros (sql/views/energy.sql) answer one instant by an index lookup, and a batch of
instants by an ASOF join that sorts the whole cluster-day's curve (8.6 M rows at 8 GPUs x 6 h) for
each statement that asks; here each GPU's curve is read once, already sorted (the table is written
ordered by host, gpu, t_ns; sorted here only if it is not), and every lookup is a ``searchsorted``.
The arithmetic is the macro's, operation for operation, so energies are the same doubles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels import RUN_GAP_NS  # energy_curve's gap: next_t_ns / next_w are NULL across it

CURVE_SQL = """
SELECT t_ns, power_w::DOUBLE AS power_w, energy_j{extra}
FROM energy_curve WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu
"""
SOURCES_SQL = """
SELECT source::VARCHAR AS source, count(*) AS n, bool_or(is_average) AS is_average
FROM energy_curve WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu
GROUP BY ALL ORDER BY n DESC, source
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


def sources(con, host: str, gpu: int) -> list[tuple[str, int, bool]]:
    """The GPU's sources in its curve that day: (source, samples, is_average), most samples first."""
    return con.execute(SOURCES_SQL, {"host": host, "gpu": gpu}).fetchall()


def read_curve(con, host: str, gpu: int, source: str | None = None) -> Curve:
    """The GPU's rows of the partition day's energy_curve, sorted by t_ns; ``mine`` marks the rows of
    ``source`` (a boolean column, not the strings: reading those cost more than the rest).

    next_t_ns / next_w are not read: by the table's definition (sql/energy_curve/energy_curve.sql)
    they are the next row's t_ns / power_w when it is at most RUN_GAP_NS later, else NULL, so they
    are the same values taken from t_ns and power_w here (half the columns to decode: the read was
    most of the phase assets' time on a curve)."""
    params: dict = {"host": host, "gpu": gpu}
    extra = ""
    if source is not None:
        extra, params["source"] = ", source::VARCHAR = $source AS mine", source
    tab = con.sql(CURVE_SQL.format(extra=extra), params=params).fetchnumpy()  # no NULLs: plain arrays
    t = np.asarray(tab["t_ns"], dtype=np.int64)
    # the pipeline's connections do not preserve insertion order: sort here when the scan did not
    order = None if len(t) < 2 or bool((t[1:] >= t[:-1]).all()) else np.argsort(t, kind="stable")

    def col(name: str, dtype) -> np.ndarray:
        v = np.asarray(tab[name], dtype=dtype)
        return v if order is None else v[order]

    t, p = col("t_ns", np.int64), col("power_w", np.float64)
    has_next = np.zeros(len(t), dtype=bool)
    has_next[:-1] = np.diff(t) <= RUN_GAP_NS
    return Curve(
        t_ns=t,
        power_w=p,
        energy_j=col("energy_j", np.float64),
        next_t_ns=np.where(has_next, np.append(t[1:], 0), 0),
        next_w=np.where(has_next, np.append(p[1:], np.nan), np.nan),
        has_next=has_next,
        mine=col("mine", bool) if source is not None else np.ones(len(t), dtype=bool),
    )
