"""Each GPU's cumulative energy at every second boundary (table ``energy_curve``): the compact form
of its energy curve, from which the energy between any two instants is exact.

Why: E(t), the trapezoid integral of the GPU's best-source samples from its first sample of the
day (nothing across a gap over kernels.RUN_GAP_NS), is piecewise quadratic with a knot at every sample.
Storing E at every sample repeats the raw data (172 MB beside 168 MB of raw power on a 50 Hz
day). E and P at each second's start and end, with the raw samples of t's own second, give
E(t) exactly: inside a second the power is linear between the points (start, P), the second's
samples, (end, P'), since P at a boundary lies on the segment that crosses it. One row per
GPU-second that holds a sample or lies inside a segment; a second with no row is flat (no
power measured), its E the end energy of the last row before it.

The producer is a pure function of one GPU's raw samples of one UTC day (``energy_seconds``),
returning a ``pa.RecordBatch`` of ``ENERGY_SCHEMA``. The SQL macros ``energy_at_ns`` and
``energy_between`` (sql/views/power_energy.sql) read it with the samples of one second; Python readers
that need the whole curve rebuild it from the raw samples (pipeline/phases/curve.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.kernels import energy_curve, time_runs

SECOND_NS = 1_000_000_000
DAY_NS = 86_400 * SECOND_NS

ENERGY_SCHEMA = pa.schema([  # without the date (the write adds it)
    ("host", pa.dictionary(pa.int32(), pa.string())),
    ("gpu", pa.uint8()),
    ("t_ns", pa.int64()),
    ("energy_j", pa.float64()),
    ("end_energy_j", pa.float64()),
    ("power_w", pa.float64()),
    ("end_power_w", pa.float64()),
    ("first_t_ns", pa.int64()),
    ("last_t_ns", pa.int64()),
    ("samples", pa.int32()),
    ("source_rank", pa.uint8()),
])
"""One row per GPU-second: t_ns the second's start (ns); energy_j / end_energy_j E at its start and
end; power_w / end_power_w P there (NULL where no segment crosses that instant); first_t_ns,
last_t_ns, samples of the GPU's best-source samples inside it (samples sharing a timestamp are one);
source_rank the rank of those samples' source (view power_day's source_rank macro)."""


def curve_at(t: np.ndarray, p: np.ndarray, e: np.ndarray, linked: np.ndarray, x: np.ndarray,
             i: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E(x) and P(x) at instants ``x`` (ns) on a GPU's curve at every sample (t sorted, p, e, linked:
    kernels.energy_curve), with whether P is defined: the sample at or before x, the trapezoid
    towards the next one when linked; E 0 before the first sample, P NaN where undefined. The one
    implementation: energy_curve's second boundaries (with the unrounded power) and the phases'
    lookups (pipeline/phases/curve.Curve, with the power rounded to FLOAT) both use it. ``i``: the
    index of the last sample at or before each x (−1 for none), when the caller has it."""
    if i is None:
        i = np.searchsorted(t, x, side="right") - 1
    j = np.maximum(i, 0)
    at_sample = (i >= 0) & (t[j] == x)
    inside = (i >= 0) & linked[j] & (x > t[j])
    k = np.minimum(j + 1, len(t) - 1)
    d = (x - t[j]).astype(np.float64)
    span = (t[k] - t[j]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        pw = p[j] + (p[k] - p[j]) * d / span
        energy = e[j] + (d / 1e9) * (p[j] + pw) / 2
    energy = np.where(i < 0, 0.0, np.where(inside, energy, e[j]))
    power = np.where(inside, pw, np.where(at_sample, p[j], np.nan))
    return energy, power, inside | at_sample


def _at_or_before(t: np.ndarray, left: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``searchsorted(t, x, "right") - 1`` from ``left = searchsorted(t, x, "left")``, ``t`` unique."""
    on = left < len(t)
    on[on] = t[left[on]] == x[on]
    return left - 1 + on


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)`` for integers: their distinct values, sorted, by one sort of both and a
    comparison of neighbours. numpy's union1d finds the distinct values through a hash table
    first (a GPU-day's ~86 k seconds and ~86 k crossed seconds: ~18 ms, this ~1 ms)."""
    x = np.concatenate([a, b])
    x.sort()
    if len(x) < 2:
        return x
    new = np.empty(len(x), bool)
    new[0] = True
    np.not_equal(x[1:], x[:-1], out=new[1:])
    return x[new]


def energy_seconds(t_ns: np.ndarray, power_w: np.ndarray, source_rank: np.ndarray, host: str = "", gpu: int = 0,
                   curve: dict[str, np.ndarray] | None = None) -> pa.RecordBatch:
    """One GPU's ``energy_curve`` rows from its raw samples of one UTC day (any order; the source
    ranking per minute and the mean of samples sharing a timestamp as kernels.best_samples).
    ``curve``: kernels.energy_curve of these samples, when the caller has it already."""
    c = curve if curve is not None else energy_curve(t_ns, power_w, source_rank)
    t, p, e, linked = c["t_ns"], c["power_w"], c["energy_j"], c["linked"]
    if not len(t):
        return pa.RecordBatch.from_pylist([], schema=ENERGY_SCHEMA)
    day_end_s = (int(t[0]) // DAY_NS + 1) * 86_400
    firsts, _ = time_runs(t, SECOND_NS)  # each second's first sample
    owned = t[firsts] // SECOND_NS  # the seconds holding a sample
    bounds = np.append(firsts, len(t))
    # seconds whose start lies strictly inside a segment: at most the two after a linked sample,
    # and only a second's last sample has its next one beyond the second (t is sorted), so the
    # candidates are one or two a second, not a copy of every sample (memory: ~5 M samples a GPU-day)
    ends = firsts[1:] - 1
    ends = ends[linked[ends]]
    nxt = t[ends + 1]
    inner = [t[ends] // SECOND_NS + k for k in (1, 2)]
    crossed = np.concatenate([s[s * SECOND_NS < nxt] for s in inner])
    seconds = _union(owned, crossed)
    del firsts, ends, nxt, inner, crossed
    seconds = seconds[seconds < day_end_s]
    start = seconds * SECOND_NS
    end = start + SECOND_NS
    # each second's first sample and the next second's, looked up among the seconds holding one
    # (not in every sample); the sample at or before an instant: the one before, or the first if
    # it lies on the instant (the curve's times are unique)
    first = bounds[np.searchsorted(owned, seconds)]
    after = bounds[np.searchsorted(owned, seconds + 1)]
    del owned, bounds
    e0, p0, has0 = curve_at(t, p, e, linked, start, _at_or_before(t, first, start))
    e1, p1, has1 = curve_at(t, p, e, linked, end, _at_or_before(t, after, end))
    has1 &= seconds + 1 < day_end_s  # the curve restarts at midnight: nothing crosses it
    count = after - first
    some = count > 0
    last = np.maximum(after - 1, 0)
    at = np.minimum(first, len(t) - 1)
    rank = source_rank[c["first"][at]]
    n = len(seconds)
    return pa.record_batch({
        "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([host])),
        "gpu": pa.array(np.full(n, gpu, np.uint8)),
        "t_ns": start,
        "energy_j": e0,
        "end_energy_j": e1,
        "power_w": pa.array(p0, mask=~has0),
        "end_power_w": pa.array(p1, mask=~has1),
        "first_t_ns": pa.array(t[at], mask=~some),
        "last_t_ns": pa.array(t[last], mask=~some),
        "samples": count.astype(np.int32),
        "source_rank": pa.array(rank.astype(np.uint8), mask=~some),
    }, schema=ENERGY_SCHEMA)


def energy_at(rows: pa.RecordBatch | pa.Table, t_ns: np.ndarray, power_w: np.ndarray, source_rank: np.ndarray, at: np.ndarray) -> np.ndarray:
    """E(at) (J) for one GPU from its ``energy_curve`` rows and the raw samples of the seconds of
    ``at`` (a superset is fine): what the macro energy_at_ns computes, instant by instant in Python
    (a reference for tests). 0 before the GPU's first sample, the day's total after its last."""
    r = {name: rows.column(name).to_numpy(zero_copy_only=False) for name in ("t_ns", "energy_j", "end_energy_j", "power_w", "end_power_w", "source_rank")}
    r["source_rank"] = rows.column("source_rank").fill_null(255).to_numpy(zero_copy_only=False)
    out = np.zeros(len(at))
    i = np.searchsorted(r["t_ns"], at, side="right") - 1
    for n, x in enumerate(at):
        k = int(i[n])
        if k < 0 or int(x) - int(x) % DAY_NS > r["t_ns"][k]:
            continue
        b = int(r["t_ns"][k])
        if int(x) >= b + SECOND_NS:
            out[n] = r["end_energy_j"][k]
            continue
        pts_t: list[int] = []
        pts_p: list[float] = []
        if not np.isnan(r["power_w"][k]):
            pts_t.append(b)
            pts_p.append(float(r["power_w"][k]))
        mine = (t_ns >= b) & (t_ns < b + SECOND_NS) & (source_rank == r["source_rank"][k])
        ts, ps = t_ns[mine], power_w[mine].astype(np.float64)
        for u in np.unique(ts):
            pts_t.append(int(u))
            pts_p.append(float(ps[ts == u].mean()))
        if not np.isnan(r["end_power_w"][k]):
            pts_t.append(b + SECOND_NS)
            pts_p.append(float(r["end_power_w"][k]))
        acc = float(r["energy_j"][k])
        for (xa, pa_), (xb, pb) in zip(zip(pts_t, pts_p, strict=True), zip(pts_t[1:], pts_p[1:], strict=True), strict=False):
            if xa >= x or xb <= xa:
                continue
            d = min(int(x), xb) - xa
            acc += d / 1e9 * (pa_ + (pa_ + (pb - pa_) * d / (xb - xa))) / 2
        out[n] = acc
    return out


__all__ = ["ENERGY_SCHEMA", "curve_at", "energy_at", "energy_seconds"]
