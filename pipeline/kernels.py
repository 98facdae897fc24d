"""Per-GPU time-series kernels in numpy and polars, where they are measured faster than DuckDB.

Measured (one GPU-day at 50 Hz, 4.32 M samples, one thread, this project's 2-core dev box): the
largest max − min over sliding 2 s windows took 85.5 s CPU as a DuckDB RANGE window
(`max(p) OVER (ORDER BY t RANGE BETWEEN CURRENT ROW AND 2 s FOLLOWING)` and `min`) and 0.41 s as
polars `rolling_max_by` / `rolling_min_by` (monotonic deques): 200× less; max_swings now slides
only the block pairs that can hold the maximum. power_1s, the energy curve and the 100 ms grid are numpy
over one GPU's samples (a stable sort if unsorted, reduceat per minute and slot, cumsum): ~3x
less CPU than their SQL oracles (tests/oracles/), whose windows sort every sample. The series
engine (pipeline/series/) reads each host's samples once and runs them one GPU at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import polars as pl

RUN_GAP_NS = 2_000_000_000
"""A sample interval longer than this ends a run (as power_1s and the energy curve treat it):
sliding windows do not reach across it."""


def _rolling_best(t_ns: np.ndarray, p: np.ndarray, window_s: int) -> float:
    """The largest max − min of ``p`` over the windows (t − W, t] ending at each sample, runs split at
    gaps over RUN_GAP_NS (polars ``rolling_max_by`` / ``rolling_min_by`` on one time axis, each run
    shifted past the previous one by more than W, so no window reaches across)."""
    t0, t1 = int(t_ns[0]), int(t_ns[-1])
    stride = (t1 - t0) + (window_s + 1) * 1_000_000_000
    group = np.cumsum(np.r_[False, np.diff(t_ns) > RUN_GAP_NS])
    df = pl.DataFrame({"ts": group * stride + (t_ns - t0), "p": p}).with_columns(pl.col("ts").cast(pl.Datetime("ns")))
    swing = df.select((pl.col("p").rolling_max_by("ts", f"{window_s}s") - pl.col("p").rolling_min_by("ts", f"{window_s}s")).max()).item()
    return float(swing)


FINE_BLOCKS = 30
"""_max_swing bounds each window by the ⌈W / b⌉ + 1 fine blocks (b = W / FINE_BLOCKS, at least
MIN_FINE_NS) it can touch, where the W-block pairs left many samples to slide."""
MIN_FINE_NS = 100_000_000
FINE_FROM_SAMPLES = 20_000
"""Fewer samples left to slide than this: slid at once (the fine bound would cost more)."""


def _fine_spans(t_ns: np.ndarray, p: np.ndarray, w_ns: int, best: float) -> np.ndarray:
    """Which of these samples a window that may beat ``best`` can hold: a window ending in fine
    block j lies inside fine blocks j − K + 1 .. j (K = ⌈W / b⌉ + 1), so only where their joint
    range beats ``best`` are those K blocks kept (polars rolling over the blocks present)."""
    b_ns = max(w_ns // FINE_BLOCKS, MIN_FINE_NS)
    k = -(-w_ns // b_ns) + 1
    fine = t_ns - t_ns[0]
    fine //= b_ns
    first = np.flatnonzero(np.r_[True, fine[1:] != fine[:-1]])
    blocks = pl.DataFrame({"j": fine[first], "hi": np.maximum.reduceat(p, first), "lo": np.minimum.reduceat(p, first)})
    bound = blocks.select(pl.col("hi").rolling_max_by("j", f"{k}i") - pl.col("lo").rolling_min_by("j", f"{k}i"))
    j = blocks["j"].to_numpy()
    ends = np.flatnonzero(bound.to_series().to_numpy() > best)  # blocks a window that may beat best ends in
    span = np.zeros(len(j) + 1, np.int64)  # mark the blocks present in j − K + 1 .. j of each
    np.add.at(span, np.searchsorted(j, j[ends] - k + 1), 1)
    np.add.at(span, ends + 1, -1)
    return np.repeat(np.cumsum(span[:-1]) > 0, np.diff(np.r_[first, len(t_ns)]))  # each block's mark on its samples


def _max_swing(t_ns: np.ndarray, p: np.ndarray, gap: np.ndarray, window_s: int) -> float:
    """One series' largest max − min over the windows (t − W, t] ending at a sample (see max_swings).

    Pruned, still exact: cut the series (its runs) into W-long time blocks [kW, (k + 1)W). A
    block lies inside the window ending at its last sample, so the largest block range L is
    reached; a window ending in block k lies inside blocks k − 1 and k, so it can beat L only if
    the two blocks' joint range does. Where those pairs still hold many samples (a 60 s window over
    a trace whose spikes recur every few seconds), _fine_spans bounds each window by finer blocks.
    Only what is left is slid sample by sample (measured, 8 GPU-days of capture 4 at W = 60 s:
    16.8 M samples left by the pairs, 1.3 M by the fine blocks)."""
    w_ns = window_s * 1_000_000_000
    # where a block starts: the first sample at or after each block edge kW (a sorted search per
    # edge, not a block number per sample: a GPU-day's int64 array, and a division per sample, for
    # each window), and where a run starts (a mark per sample, one byte)
    first_block, last_block = int(t_ns[0]) // w_ns, int(t_ns[-1]) // w_ns
    edges = np.searchsorted(t_ns, np.arange(first_block + 1, last_block + 1, dtype=np.int64) * w_ns, side="left")
    cut = gap.copy()
    cut[0] = True
    cut[edges] = True
    starts = np.flatnonzero(cut)
    del cut
    block = t_ns[starts] // w_ns  # each piece's block
    hi, lo = np.maximum.reduceat(p, starts), np.minimum.reduceat(p, starts)
    best = float((hi - lo).max())
    follows = ~gap[starts[1:]] & (block[1:] == block[:-1] + 1)  # same run, the next block
    pair = np.maximum(hi[1:], hi[:-1]) - np.minimum(lo[1:], lo[:-1])
    later = np.flatnonzero(follows & (pair > best)) + 1
    if not len(later):
        return best
    mark = np.zeros(len(starts), bool)
    mark[later] = mark[later - 1] = True
    keep = np.repeat(mark, np.diff(np.r_[starts, len(t_ns)]))
    # windows ending in a marked later block see all their samples; others see a subset of
    # theirs, so they never exceed their true swing (the same holds for the fine spans within)
    t, q = t_ns[keep], p[keep]
    if len(t) > FINE_FROM_SAMPLES:
        fine = _fine_spans(t, q, w_ns, best)
        t, q = t[fine], q[fine]
    return max(best, _rolling_best(t, q, window_s)) if len(t) else best


def max_swings(samples: pl.DataFrame, windows_s: tuple[int, ...]) -> pl.DataFrame:
    """Per ``gpu`` (and run without a gap > 2 s): the largest max − min of ``p`` over the samples
    inside any window of W seconds, W in ``windows_s``; exact over the sample times (every window
    (t − W, t] ending at a sample; any other window holds a subset of one of these).

    ``samples``: columns gpu, t_ns (Int64), p (Float64), sorted by gpu and t_ns.
    Returns gpu, window_s, max_swing_w, sample_interval_ms (median spacing of the series).
    Measured (swing_stats' native part, 8 GPUs x 6 h, 10.1 M samples, both series, 4 windows, one
    thread): 3.16 s CPU sliding every sample through polars' rolling max/min, 1.11 s pruned to the
    block pairs that can matter (_max_swing), identical rows.
    """
    rows: list[tuple[int, int, float, float | None]] = []
    for (gpu,), part in ([] if samples.is_empty() else samples.partition_by("gpu", as_dict=True, maintain_order=True).items()):
        rows.extend((int(gpu), *row) for row in series_swings(part["t_ns"].to_numpy(), part["p"].to_numpy().astype(np.float64), windows_s))
    schema = {"gpu": pl.Int64, "window_s": pl.Int64, "max_swing_w": pl.Float64, "sample_interval_ms": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def series_swings(t_ns: np.ndarray, p: np.ndarray, windows_s: tuple[int, ...]) -> list[tuple[int, float, float | None]]:
    """One series' (window_s, max_swing_w, sample_interval_ms) per window (max_swings, for one GPU's
    sorted samples: no frame to split); none for an empty series."""
    if not len(t_ns):
        return []
    step = np.diff(t_ns)  # one difference array for the gaps and the spacing
    gap = np.r_[True, step > RUN_GAP_NS]
    spacing = float(np.median(step, overwrite_input=True)) / 1e6 if len(t_ns) > 1 else None  # partitions step in place: no copy
    del step
    return [(w, _max_swing(t_ns, p, gap, w), spacing) for w in windows_s]


def arrow_frame(table) -> pl.DataFrame:
    """An Arrow table (a DuckDB result) as a polars DataFrame; ``pl.from_arrow``'s type says
    DataFrame or Series."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


@contextmanager
def registered(con, name: str, frame: pl.DataFrame) -> Iterator[None]:
    """A kernel's frame visible to SQL as view ``name`` for the statements of the block (compute
    connections turn replacement scans of Python variables off), unregistered after."""
    con.register(name, frame.to_arrow())
    try:
        yield
    finally:
        con.unregister(name)


SLOT_NS = 100_000_000
"""The 100 ms grid of power_100ms."""


def _sorted_by_time(t_ns: np.ndarray) -> np.ndarray:
    # neighbours compared, not np.diff: no array of every difference (a GPU-day: 40 MB, ~10 ms)
    if len(t_ns) > 1 and not bool((t_ns[1:] >= t_ns[:-1]).all()):
        return np.argsort(t_ns, kind="stable")
    return np.arange(len(t_ns))


def time_runs(t: np.ndarray, width_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The first row and the row count of each run of ``t`` (sorted, not empty) in one bucket
    ``t // width_ns``. Where the buckets the span holds are few beside the rows (the minutes of a
    day's samples), their bounds are looked up in ``t`` (no division or comparison of every row);
    else the rows' buckets are compared. A bound's lookup costs about what 100 rows' division and
    comparison do (a GPU-day of 4.2 M best-source rows: its 86 400 seconds looked up in ~11 ms,
    compared in ~5.5 ms; its 1 440 minutes looked up in 0.1 ms)."""
    n = len(t)
    lo, hi = int(t[0]) // width_ns, int(t[-1]) // width_ns
    if (hi - lo) * 100 < n:
        bounds = np.empty(hi - lo + 2, np.int64)
        bounds[0], bounds[-1] = 0, n
        bounds[1:-1] = np.searchsorted(t, np.arange(lo + 1, hi + 1, dtype=np.int64) * width_ns)
        count = np.diff(bounds)
        some = count > 0
        return bounds[:-1][some], count[some]
    bucket = t // width_ns
    change = bucket[1:] != bucket[:-1]
    del bucket
    starts = np.empty(int(np.count_nonzero(change)) + 1, np.int64)
    starts[0] = 0
    np.add(np.flatnonzero(change), 1, out=starts[1:])
    return starts, np.diff(starts, append=n)


def _per_minute_min(t: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's minimum of ``values`` over its minute (``t`` sorted)."""
    starts, count = time_runs(t, 60_000_000_000)
    return np.repeat(np.minimum.reduceat(values, starts), count)


@dataclass(frozen=True, eq=False)
class BestRows:
    """One GPU's rows of view power_day (in each minute only the best-ranked source's), in time
    order: found once per GPU for every kernel of the series pass (each sorted and ranked its own
    copy before: three stable sorts and per-minute minima of every sample)."""

    idx: np.ndarray
    """Input index of each best-source row, in time order (stable)."""
    t_ns: np.ndarray
    """Their times (``t_ns[idx]``)."""
    fallback: np.ndarray | None = None
    """Input index, in time order, of the rows of the best-ranked other source that reports a 1 s
    average in a minute whose best source is another (grid_100ms' 1 s average); None when not asked."""


def best_rows_of(t_ns: np.ndarray, source_rank: np.ndarray, has_avg: np.ndarray | None = None) -> BestRows:
    """:class:`BestRows` of one GPU's samples (any order; sorted here, stably, when unsorted).
    ``has_avg``: also the 1 s-average fallback rows (the row has ``power_avg_w``)."""
    idx = _sorted_by_time(t_ns)
    t, rank = t_ns[idx], source_rank[idx]
    fallback = None
    if not len(t):
        return BestRows(idx, t, idx[:0] if has_avg is not None else None)
    best = _per_minute_min(t, rank)
    keep = rank == best
    if has_avg is not None:
        has = has_avg[idx]
        other = has & ~keep
        if other.any():  # rows of the best-ranked source reporting a 1 s average, the best source being another
            other &= rank == _per_minute_min(t, np.where(has, rank, np.iinfo(rank.dtype).max))
        del has
        fallback = idx[other]
        del other
    del best, rank
    if not keep.all():
        idx, t = idx[keep], t[keep]
    return BestRows(idx, t, fallback)


def best_rows(t_ns: np.ndarray, source_rank: np.ndarray) -> np.ndarray:
    """The rows of view power_day for one GPU, as indices in time order (stable): in each minute
    only the best-ranked source's rows (lowest ``source_rank``)."""
    return best_rows_of(t_ns, source_rank).idx


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's round(): halves away from zero (np.round rounds them to even). ``np.rint`` (to even)
    is the same except at an exact half whose even neighbour lies towards zero: only those few
    are moved (v − rint(v) is exact, so a half is found exactly), not every value through trunc,
    sign and a product (measured: 69 → ~35 ms a GPU-day of 5 M terms)."""
    r = np.rint(v)
    d = v - r
    np.abs(d, out=d)
    ties = np.flatnonzero(d == 0.5)
    del d
    if len(ties):
        vt = v[ties]
        towards_zero = np.abs(r[ties]) < np.abs(vt)
        r[ties[towards_zero]] += np.sign(vt[towards_zero])
    return r


def seconds_1s(t_ns: np.ndarray, power_w: np.ndarray, source_rank: np.ndarray, is_average: np.ndarray,
               best: BestRows | None = None) -> dict[str, np.ndarray]:
    """One GPU's power_1s rows (tests/oracles/power_1s.sql is the same in SQL) from its raw samples of the
    day: per second with a best-source row, the mean, min and max power, the trapezoid energy of
    the segments ending in it (each after a gap of at most RUN_GAP_NS; FLOAT sums as the SQL's),
    summed exactly as the oracle's ``xsum`` does (each term rounded half away to 1e-12 J, an integer sum),
    the row count, whether a gap (or the day's start) precedes a row, rows repeating the previous
    one's timestamp, whether a row is a 1 s average (``is_average``). Returns those arrays, ``second`` (t_ns // 1 s) and ``first`` (input index of
    each second's first row, for the source). ``best``: :func:`best_rows_of` of these samples, when
    the caller has it already."""
    if best is None:
        best = best_rows_of(t_ns, source_rank)
    idx, t = best.idx, best.t_ns
    p = power_w[idx].astype(np.float32, copy=False)
    dt_s = np.empty(len(t))
    if len(t):
        dt_s[0] = np.nan
        np.divide(np.diff(t), 1e9, out=dt_s[1:])
    linked = dt_s <= RUN_GAP_NS / 1e9
    term = np.zeros(len(t))
    if len(t) > 1:
        half = p[1:] + p[:-1]  # FLOAT + FLOAT, / 2: FLOAT in DuckDB
        half /= np.float32(2)
        term[1:] = half  # to double, in place: no temporaries of every sample beyond this one
        del half
        term[1:] *= dt_s[1:]
        term[1:][~linked[1:]] = 0.0
    term *= 1e12
    scaled = _round_half_away(term).astype(np.int64)
    del term
    starts, count = time_runs(t, 1_000_000_000) if len(t) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    red = (lambda f, a: f.reduceat(a, starts)) if len(t) else (lambda f, a: a[:0])
    return {
        "second": t[starts] // 1_000_000_000,
        "mean_w": red(np.add, p.astype(np.float64)) / np.maximum(count, 1),
        "min_w": red(np.minimum, p),
        "max_w": red(np.maximum, p),
        "energy_j": red(np.add, scaled).astype(np.float64) / 1e12,
        "samples": count,
        "gap_before": red(np.logical_or, ~linked),
        "duplicate_samples": red(np.add, (dt_s == 0).astype(np.int64)),
        "is_average": red(np.logical_or, is_average[idx]),
        "first": idx[starts],
    }


def best_samples(t_ns: np.ndarray, power_w: np.ndarray, source_rank: np.ndarray,
                 best: BestRows | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One GPU's trace as view power_day defines it: in each minute only the best-ranked source's
    samples (lowest ``source_rank``), samples sharing a timestamp one sample (their mean), in time
    order. Input in any order (sorted here, stably, when it is not). Returns ``t_ns``, ``power_w``
    (float64) and, per output sample, the input index of its first row (for the columns a caller
    carries: source, is_average). ``best``: :func:`best_rows_of` of these samples, when the caller
    has it already."""
    if best is None:
        best = best_rows_of(t_ns, source_rank)
    idx, t = best.idx, best.t_ns
    p = power_w[idx].astype(np.float64)
    repeats = t[1:] == t[:-1]
    if repeats.any():  # samples sharing a timestamp: one sample, their mean
        starts = np.flatnonzero(np.r_[True, ~repeats])
        p = np.add.reduceat(p, starts) / np.diff(np.r_[starts, len(t)])
        t, idx = t[starts], idx[starts]
    return t, p, idx


def energy_curve(t_ns: np.ndarray, power_w: np.ndarray, source_rank: np.ndarray, best: BestRows | None = None) -> dict[str, np.ndarray]:
    """One GPU's energy curve at every sample from its raw samples of the day (the per-sample
    curve that table energy_curve keeps at second boundaries, pipeline/series/energy.py): :func:`best_samples`,
    then the cumulative trapezoid, segments over ``RUN_GAP_NS`` left out. Returns ``t_ns``,
    ``power_w``, ``energy_j``, ``linked`` (whether the next sample is within the gap) and
    ``first`` (see best_samples); the next sample's instant and power are the next row's, where
    a reader needs them (pipeline/phases/curve.Curve builds them only when asked).
    Measured: ~0.1 s CPU per million samples."""
    t, p, idx = best_samples(t_ns, power_w, source_rank, best)
    dt = np.diff(t)
    linked = dt <= RUN_GAP_NS
    segment = p[:-1] + p[1:]  # (p + p') / 2 * dt / 1e9, in place: the same values, fewer arrays alive
    segment /= 2
    segment *= dt
    del dt
    segment /= 1e9
    segment[~linked] = 0.0
    energy = np.zeros(len(t))
    np.cumsum(segment, out=energy[1:])
    del segment
    return {
        "t_ns": t,
        "power_w": p,
        "energy_j": energy,
        "linked": np.r_[linked, False] if len(t) else linked,  # no sample: no row, not one unlinked row
        "first": idx,
    }


def _slot_means(slot: np.ndarray, values: np.ndarray, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per run of equal ``slot`` (sorted): its first row, its row count, the mean of ``values``
    where ``present`` (None: every row; a NaN value is one: the mean is NaN, as in SQL) and
    whether none is."""
    if not len(slot):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool)
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    count = np.diff(np.r_[starts, len(slot)])
    if present is None:  # the same sums as with every row present, without the mask's passes
        return starts, count, np.add.reduceat(values, starts) / np.maximum(count, 1), count == 0
    n = np.add.reduceat(present.astype(np.int64), starts)
    mean = np.add.reduceat(np.where(present, values, 0.0), starts) / np.maximum(n, 1)
    return starts, count, mean, n == 0


def grid_100ms(
    t_ns: np.ndarray, power_w: np.ndarray, power_avg_w: np.ndarray, has_avg: np.ndarray, source_rank: np.ndarray, is_average: np.ndarray,
    best: BestRows | None = None,
) -> dict[str, np.ndarray]:
    """One GPU's trace on the 100 ms grid (tests/oracles/power_100ms.sql is the same in SQL): per slot with a
    sample of the minute's best source (lowest ``source_rank``), the mean power, the sample count,
    the mean 1 s average of those rows, else of the rows of the best-ranked other source that
    reports one that minute (``has_avg``: the row's ``power_avg_w`` is not NULL), and whether the
    slot's source is a 1 s average (``is_average``). Means of a few float32 values summed in float64 are
    exact whatever the order, so the rows equal the SQL's. Input in any order. Returns ``slot``
    (t_ns // 100 ms), ``power_w``, ``samples``, ``power_avg_w``, ``avg_null``, ``is_average`` and
    ``first`` (the input index of each slot's first row, for the source). ``best``:
    :func:`best_rows_of` of these samples with ``has_avg``, when the caller has it already."""
    if best is None or best.fallback is None:
        best = best_rows_of(t_ns, source_rank, has_avg)
    assert best.fallback is not None
    fb = best.fallback
    fb_slot = t_ns[fb] // SLOT_NS
    fb_starts, _, fb_mean, _ = _slot_means(fb_slot, power_avg_w[fb].astype(np.float64))
    fb_slot = fb_slot[fb_starts]
    idx = best.idx
    slot = best.t_ns // SLOT_NS
    has = has_avg[idx]
    if has.any() or not len(slot):
        starts, samples, slot_avg, avg_null = _slot_means(slot, power_avg_w[idx].astype(np.float64), has)
    else:  # no best-source row has a 1 s average: every slot's mean 0 / 1, flagged NULL, as the sums give
        starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
        samples = np.diff(np.r_[starts, len(slot)])
        slot_avg, avg_null = np.zeros(len(starts)), np.ones(len(starts), bool)
    del has
    power = np.add.reduceat(power_w[idx].astype(np.float64), starts) / np.maximum(samples, 1) if len(starts) else np.zeros(0)
    slot = slot[starts]
    if len(fb_slot):
        at = np.minimum(np.searchsorted(fb_slot, slot), len(fb_slot) - 1)
        use = avg_null & (fb_slot[at] == slot)
        slot_avg[use], avg_null[use] = fb_mean[at[use]], False
    average = np.logical_or.reduceat(is_average[idx], starts) if len(starts) else np.zeros(0, bool)
    return {"slot": slot, "power_w": power, "samples": samples, "power_avg_w": slot_avg, "avg_null": avg_null,
            "is_average": average, "first": idx[starts]}


@contextmanager
def in_file_order(con) -> Iterator[None]:
    """Scans on ``con`` return rows in file order while inside (preserve_insertion_order, off on
    compute connections): a part written sorted by (host, gpu, time) reads back sorted, so a
    per-GPU read needs no sort (measured: 8 polars sorts, 1.3 s CPU, of swing_stats' reads at 8
    GPU-days)."""
    con.execute("SET preserve_insertion_order = true")
    try:
        yield
    finally:
        con.execute("SET preserve_insertion_order = false")



def second_connection(con):
    """A cursor on ``con``'s database with its variables (they are per connection): it reads
    while ``con`` may be reading the stream it yields (a streamed Python table's generator, whose
    rows ``con`` cuts to the part's scope where that drops rows). ``con``'s temp tables and temp
    views are not visible on it; its views and macros are."""
    cur = con.cursor()
    for var, value, type_ in con.execute("SELECT name, value::VARCHAR, type FROM duckdb_variables()").fetchall():
        cur.execute(f"SET VARIABLE {var} = CAST(? AS {type_})", [value])
    return cur


def interpolated_slots(slot: np.ndarray, power_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One GPU's 100 ms slots with power (``slot`` sorted, unique; ``power_w`` float64) plus the
    slots between two samples 2 to 10 slots apart, linearly interpolated as
    tests/oracles/phase_timeline.sql does (w + (w_next − w) · k / gap, the same float64
    operations in the same order: identical values)."""
    n = len(slot)
    gap = np.r_[np.diff(slot), 0]
    reps = np.where((gap >= 2) & (gap <= 10), gap, 1)
    src = np.repeat(np.arange(n), reps)
    k = np.arange(len(src)) - np.repeat(np.cumsum(reps) - reps, reps)
    w = power_w[src]
    mid = np.flatnonzero(k > 0)
    i, wi = src[mid], w[mid]
    w[mid] = wi + (power_w[i + 1] - wi) * k[mid].astype(np.float64) / gap[i].astype(np.float64)
    return slot[src] + k, w


def max_label_on_slots(slots: np.ndarray, first: np.ndarray, last: np.ndarray, label: np.ndarray, levels: int) -> np.ndarray:
    """Per slot of ``slots`` (sorted): the highest ``label`` (0 .. levels − 1) of the runs covering
    slots ``first`` to ``last`` (inclusive) that include it, −1 where none does. Difference
    arrays over the slots' span, one per label: no run is expanded slot by slot."""
    out = np.full(len(slots), -1, np.int8)
    if not len(slots) or not len(first):
        return out
    lo, hi = int(slots[0]), int(slots[-1]) + 1
    a, b = np.clip(first, lo, hi) - lo, np.clip(last + 1, lo, hi) - lo
    at = slots - lo
    for level in range(levels):
        mine = (label == level) & (a < b)
        if not mine.any():
            continue
        cover = np.zeros(hi - lo + 1, np.int64)
        np.add.at(cover, a[mine], 1)
        np.add.at(cover, b[mine], -1)
        out[np.cumsum(cover)[at] > 0] = level
    return out
