"""Power-only phase detection on a GPU's own samples: no request log, no grid.

Per GPU (one day of its best source, sorted by time), every sample gets a label:
- **prefill** when its power is at or above the *prefill threshold* = halfway between the GPU's
  decode level (lower quartile of its busy samples, as the grid detector had it: it stays on decode
  while prefill holds < 75 % of the busy time) and its high level (99th percentile of all its samples):
  the 50 % point of the edge between the memory-bound decode floor and the compute-bound prefill
  plateau (H200: ~200 W vs 700–900 W). A plain threshold, no hysteresis: hysteresis was there to keep
  100 ms means from chopping a prefill, but on the ~20 ms samples it glued decode steps (300–430 W
  spikes every ~50 ms under continuous batching) to prefills and was the main reason the
  sample-level prototype reached IoU 0.31 on capture 4; a plain threshold at the 50 % point with the
  onset lead below reaches 0.63. (Requiring two high samples in a row, to drop lone decode spikes,
  lowers capture 4 to 0.50: its prefills often show as one or two samples.)
- **decode** when at or above the middle of idle (5th percentile, capped at TDP/4) and decode level,
- **idle** otherwise.
No sample is labelled prefill on a GPU whose high level stands less than ``PLATEAU_MIN_TDP`` of its
TDP above its decode level (:func:`unresolved`): there is no prefill plateau to find, and the
endpoint's `power_resolution` says so instead.

What a sample stands for depends on its source. The driver's buffer samples (`nvml-buffer`) are
trailing averages: a run of one label spans (the sample before its first, its last sample], its
boundaries are sample instants. Instant readings (nvidia-smi, NVML's instant field, the simulator)
stand for their moment: a run spans from the midpoint before its first sample to the midpoint after
its last (measured on the A100 BurstGPT run, 250 ms nvidia-smi, against engine counters: precision
0.61 / token recall 0.30 with trailing windows, 0.78 / 0.46 centred). Either way the boundaries come
from the samples' own times (ns), nothing is put on a grid. A sample interval over 2 s is a gap and
ends a run (as the energy curve treats it).

**Onset lead.** The driver's buffer shows a prefill late: on the H200 captures the power rises 40–60 ms
after the logged prefill start (the sensor's trailing window plus the pass's ramp) and falls at the
logged first token. So a prefill run of an `nvml-buffer` source starts ``ONSET_LEAD_NS`` earlier than
its first high sample's window (the samples whose window ends inside that lead become prefill, so
runs stay a partition of the time at sample instants). The constant is *fitted on capture 2* (static
batching, 8 prefill intervals of 0.6–1 s; this detector's IoU against the logged prefills
0.870 / 0.952 / 0.961 / 0.966 / 0.962 / 0.946 for a lead of 0 / 40 / 50 / 60 / 70 / 80 ms) and
*checked on capture 4* (continuous batching, 368 prefills of median 90 ms): IoU 0.627 at 60 ms
(0.383 without a lead; its own best would be 0.638 at 50 ms). Other sources get no lead (none measured).
The threshold is the 50 % point, not fitted; it matters on capture 4 only (a fixed 450 W there,
under decode at 40+ running requests, gives 0.54; the rule gives ~500 W; capture 2 is flat from
350 to 550 W).

**Why polars.** A running "time of the next high sample" (a backward fill per GPU), run ids by
cumulative sums and one group-by: linear and vectorised. Measured against the same detector as
DuckDB windows (lag, a min over the following rows, a running sum, a group-by; identical runs:
42,336, the same prefill time) on bench/event_time.py data (8 GPUs x 1 h of the 50 Hz buffer,
1.4 M samples, one thread, this 2-core box, twice): polars 0.75-0.80 s CPU including reading the
samples one GPU at a time, DuckDB 2.9-3.1 s. We keep polars.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.kernels import RUN_GAP_NS as GAP_NS  # the same gap ends a swing window and a phase run

ONSET_LEAD_NS = {"nvml-buffer": 60_000_000}
"""Per source: how much earlier than its first high sample's window a prefill starts (see above)."""
TRAILING_SOURCES = ("nvml-buffer",)
"""Sources whose samples are trailing averages over the interval since the previous sample."""

PREFILL_RESOLVABLE_MS = 300.0
"""Power-only segments are emitted for a GPU only if its source is not a 1 s average and its median
sample interval is at most this. A prefill shows as a high sample when it covers most of a sample's
window, so it needs an interval at most about half its length: static-batching prefills (h200-capture-2:
10th percentile 590 ms, median 790 ms) are resolved by a 250 ms nvidia-smi poll (the A100 BurstGPT
run: precision 0.82 against engine counters), not by 1 s polls or averages (one sample or less per
prefill). Continuous-batching prefills (h200-capture-4: 10th percentile 60 ms, median 90 ms) need
samples ≤ 45 ms apart: the ~20 ms driver buffer. Which prefills an endpoint has is known only from
its log, so that finer rule (interval ≤ half the logged median prefill) is applied where there is a
log, by the power_segmentation_agreement check: it says "cannot be resolved" instead of comparing."""

LABELS = {0: "idle", 1: "decode", 2: "prefill"}

RUN_SCHEMA = {
    "gk": pl.Int64, "ph": pl.Int8, "lo": pl.Int64, "hi": pl.Int64, "peak_w": pl.Float64,
}


def _nearest(sorted_w: np.ndarray, q: float) -> float:
    """polars' ``quantile(q, "nearest")`` of an ascending array: the element at round-half-up((n − 1) q)."""
    return float(sorted_w[int(np.floor((len(sorted_w) - 1) * q + 0.5))])


def _rank(n: int, q: float) -> int:
    """The index :func:`_nearest` takes in an ascending array of ``n`` elements."""
    return int(np.floor((n - 1) * q + 0.5))


def _levels_unsorted(w: np.ndarray, tdp: float | None) -> tuple[float, float, float]:
    """:func:`_levels_of` of ``w`` in any order (non-empty, no NaN), without sorting it: every level
    is an order statistic (the busy samples' lower quartile is the one at rank "samples at or under
    the busy threshold" + its own rank), so two linear partitions find the same values a sort did.
    Why: the sorts were a third of phase_segments' kernel (two per GPU-day of ~50 Hz samples).
    ``w`` float32 (a FLOAT power) or float64: the levels are its elements as Python floats and the
    busy threshold is compared in double either way, so both widths give the same levels."""
    n = len(w)
    r05, r99 = _rank(n, 0.05), _rank(n, 0.99)
    part = np.partition(w, [r05, r99])
    q05, high = float(part[r05]), float(part[r99])
    if tdp is None:
        return q05, q05, high
    idle = min(q05, tdp * 0.25)
    # a float64 threshold: a Python float would be rounded to float32 against a float32 array (NEP 50)
    start = n - int(np.count_nonzero(part > np.float64(idle + 0.05 * (tdp - idle))))  # searchsorted(sorted, x, "right")
    if start >= n:
        return idle, idle, high
    k = start + _rank(n - start, 0.25)
    part.partition(k)
    return idle, float(part[k]), high


def _levels_of(w: np.ndarray, tdp: float | None) -> tuple[float, float, float]:
    """(idle_w, decode_w, high_w) of one GPU's power sorted ascending (non-empty)."""
    idle = _nearest(w, 0.05) if tdp is None else min(_nearest(w, 0.05), tdp * 0.25)
    busy = w[np.searchsorted(w, idle + 0.05 * (tdp - idle), side="right"):] if tdp is not None else w[:0]
    return idle, _nearest(busy, 0.25) if len(busy) else idle, _nearest(w, 0.99)


def levels(samples: pl.DataFrame) -> pl.DataFrame:
    """Per gk: idle_w, decode_w, high_w, prefill_w (threshold), idle_max_w.

    ``samples``: gk, t_ns, power_w, tdp_w (sorted by gk, t_ns). One sort of each GPU's power: every
    level is an element of it (the busy samples are a suffix of it), the same values as polars'
    quantiles with "nearest" (three sorts and a join, half the detector's time before)."""
    rows: list[tuple] = []
    gks = samples["gk"]
    groups = (  # one GPU (the asset's case, sorted by gk): no copy into groups
        {(gks[0],): samples} if gks[0] == gks[-1]
        else samples.select("gk", "power_w", "tdp_w").partition_by("gk", as_dict=True, maintain_order=True)
    )
    for (gk,), g in groups.items():
        w = np.sort(g["power_w"].drop_nulls().to_numpy())
        rows.append((gk, *_levels_of(w, g["tdp_w"][0])) if len(w) else (gk, None, None, None))
    out = pl.DataFrame(rows, schema={"gk": samples.schema["gk"], "idle_w": pl.Float64, "decode_w": pl.Float64, "high_w": pl.Float64}, orient="row")
    return out.with_columns(
        ((pl.col("decode_w") + pl.col("high_w")) / 2).alias("prefill_w"),
        ((pl.col("idle_w") + pl.col("decode_w")) / 2).alias("idle_max_w"),
    ).select("gk", "idle_w", "decode_w", "high_w", "prefill_w", "idle_max_w")


def detect(samples: pl.DataFrame, lead_ns: int = 0, trailing: bool = True, prefill: bool = True) -> pl.DataFrame:
    """Runs of one label per GPU at the samples' own instants.

    ``samples``: gk (Int64), t_ns (Int64, distinct per gk), power_w (Float64), tdp_w (Float64),
    sorted by gk, t_ns; one source per gk (the caller picks it). ``lead_ns``: the source's onset
    lead; ``trailing``: its samples are trailing averages (else instants, centred); ``prefill``:
    false where the GPU shows no prefill plateau (:func:`unresolved`): decode and idle runs only.
    Returns gk, ph (0 idle, 1 decode, 2 prefill), lo, hi (ns; the run is (lo, hi]), peak_w (the
    highest sample of the run and the one before it)."""
    if samples.is_empty():
        return pl.DataFrame(schema=RUN_SCHEMA)
    lv = levels(samples)
    df = samples.select("gk", "t_ns", "power_w").join(lv, on="gk", how="left", maintain_order="left")
    # plain shifts, the GPU's boundaries marked explicitly (cheaper than windows over gk; the
    # backward fill stays inside a stretch by carrying the stretch id along)
    prev_t = pl.col("t_ns").shift(1)
    next_t = pl.col("t_ns").shift(-1)
    df = df.with_columns(
        # a new gap-free stretch: the GPU's first sample or the first after a gap
        (prev_t.is_null() | (pl.col("gk") != pl.col("gk").shift(1)) | (pl.col("t_ns") - prev_t > GAP_NS)).alias("fresh"),
        (next_t.is_null() | (pl.col("gk") != pl.col("gk").shift(-1)) | (next_t - pl.col("t_ns") > GAP_NS)).alias("last"),
        ((pl.col("power_w") >= pl.col("prefill_w")) & pl.lit(prefill)).alias("high"),
    ).with_columns(pl.col("fresh").cum_sum().alias("stretch"))
    if trailing:  # the sample's window: (previous sample, sample]
        lo, hi = prev_t, pl.col("t_ns")
    else:  # centred: (midpoint before, midpoint after]
        lo, hi = (prev_t + pl.col("t_ns")) // 2, pl.when(pl.col("last")).then(pl.col("t_ns")).otherwise((pl.col("t_ns") + next_t) // 2)
    df = df.with_columns(pl.when(pl.col("fresh")).then(pl.col("t_ns")).otherwise(lo).alias("lo"), hi.alias("hi"))
    # where the next high sample's window starts (a backward fill in the stretch): a sample whose
    # window ends less than the lead before it is prefill (the run then starts at a window boundary
    # at most one interval before the exact lead)
    nxt = pl.when(pl.col("stretch") == pl.when(pl.col("high")).then(pl.col("stretch")).backward_fill()) \
        .then(pl.when(pl.col("high")).then(pl.col("lo")).backward_fill())
    df = df.with_columns(
        pl.when(pl.col("high") | ((nxt - pl.col("hi")) < lead_ns)).then(2)
        .when(pl.col("power_w") >= pl.col("idle_max_w")).then(1)
        .otherwise(0).cast(pl.Int8).alias("ph"),
        pl.when(pl.col("fresh")).then(pl.col("power_w")).otherwise(pl.col("power_w").shift(1)).alias("p_lo"),
    )
    df = df.with_columns(
        (pl.col("fresh") | (pl.col("ph") != pl.col("ph").shift(1))).fill_null(True).cum_sum().alias("run")
    )
    runs = df.group_by("run", maintain_order=True).agg(
        pl.col("gk").first(), pl.col("ph").first(), pl.col("lo").first(), pl.col("hi").last(),
        pl.max_horizontal(pl.col("power_w").max(), pl.col("p_lo").first()).alias("peak_w"),
    )
    # a run of one lone sample right after a gap has no length: nothing to label
    return runs.filter(pl.col("hi") > pl.col("lo")).select(
        pl.col("gk").cast(pl.Int64), "ph", pl.col("lo").cast(pl.Int64), pl.col("hi").cast(pl.Int64), pl.col("peak_w").cast(pl.Float64)
    )


class _Windows:
    """Each sample's window (lo, hi] (ns), computed at the indices asked for: a trailing source's
    (previous sample, sample], an instant source's (midpoint before, midpoint after], lo the sample
    itself at a stretch's first sample, hi the sample itself at its last. Why at indices: only run
    bounds and the samples before a high one are read, and three day-sized int64 arrays (previous
    instant, lo, hi) were most of the detector's memory."""

    def __init__(self, t: np.ndarray, fresh: np.ndarray, trailing: bool) -> None:
        self.t, self.fresh, self.trailing = t, fresh, trailing

    def lo(self, i: np.ndarray) -> np.ndarray:
        t = self.t
        prev = t[np.maximum(i - 1, 0)]
        return np.where(self.fresh[i], t[i], prev if self.trailing else (prev + t[i]) // 2)

    def hi(self, i: np.ndarray) -> np.ndarray:
        t = self.t
        if self.trailing:
            return t[i]
        nxt = np.minimum(i + 1, len(t) - 1)
        last = (i == len(t) - 1) | self.fresh[nxt]  # a stretch's last sample: the next one starts another
        return np.where(last, t[i], (t[i] + t[nxt]) // 2)


def _lead_into(ph: np.ndarray, high: np.ndarray, windows: _Windows, fresh: np.ndarray, lead_ns: int) -> None:
    """Label prefill (2 in ``ph``) each sample whose window ends less than ``lead_ns`` before the
    window start of a later high sample (indices ``high``) of its stretch (no ``fresh`` sample
    after it up to that one). Windows are in time order, so that gap grows with the distance back:
    step back from every high sample one sample at a time while any still falls inside the lead
    (a few steps: the lead spans a few samples), instead of a next-high index per sample (a later
    high sample qualifying means the nearest one does too: its window starts no later)."""
    j, d = high, 1
    starts = windows.lo(high)
    while len(j):
        i = j - d
        keep = (i >= 0) & (starts - windows.hi(np.maximum(i, 0)) < lead_ns)
        keep[keep] &= ~fresh[i[keep] + 1]  # the stretch does not restart between i and its high sample
        j, starts, i = j[keep], starts[keep], i[keep]
        ph[i] = 2
        d += 1


def detect_gpu(gk: int, t_ns: np.ndarray, power_w: np.ndarray, tdp_w: float, lead_ns: int = 0, trailing: bool = True,
               prefill: bool = True, levels: tuple[float, float, float] | None = None) -> pl.DataFrame:
    """:func:`detect` for one GPU's samples (t_ns sorted and distinct, power_w without NULLs) in
    numpy: the same runs (tests/test_phases_power_native.py holds the two equal), without building
    a frame of the samples. Why: the asset runs the detector one GPU at a time, and the polars
    expressions cost ~1.3 s CPU at 8 GPUs x 6 h of the 50 Hz buffer (threads included), this ~0.3 s.
    A NaN power (polars orders NaN above every number) goes to :func:`detect`. ``levels``: the
    GPU's (idle_w, decode_w, high_w) of exactly these samples when the caller has them already
    (:func:`gpu_levels`; the partitions that find them are most of the detector's time)."""
    n = len(t_ns)
    if n == 0 or np.isnan(power_w).any():
        return detect(pl.DataFrame({"gk": np.full(n, gk, dtype=np.int64), "t_ns": t_ns, "power_w": power_w, "tdp_w": np.full(n, tdp_w)},
                                   schema={"gk": pl.Int64, "t_ns": pl.Int64, "power_w": pl.Float64, "tdp_w": pl.Float64}), lead_ns, trailing, prefill)
    t, w = np.asarray(t_ns, dtype=np.int64), np.asarray(power_w, dtype=np.float64)
    idle_w, decode_w, high_w = levels if levels is not None else _levels_unsorted(w, tdp_w)
    prefill_w, idle_max_w = (decode_w + high_w) / 2, (idle_w + decode_w) / 2
    fresh = np.empty(n, dtype=bool)  # a stretch's first sample: the GPU's first or the first after a gap
    fresh[0] = True
    np.greater(np.diff(t), GAP_NS, out=fresh[1:])
    windows = _Windows(t, fresh, trailing)
    high = (w >= prefill_w) & prefill
    ph = (w >= idle_max_w).astype(np.int8)
    ph[high] = 2
    if lead_ns > 0:
        _lead_into(ph, np.flatnonzero(high), windows, fresh, lead_ns)
    del high
    starts = np.flatnonzero(fresh | np.r_[True, ph[1:] != ph[:-1]])
    ends = np.r_[starts[1:], n] - 1
    p_lo = np.where(fresh[starts], w[starts], w[np.maximum(starts - 1, 0)])
    runs = pl.DataFrame({
        "gk": np.full(len(starts), gk, dtype=np.int64), "ph": ph[starts], "lo": windows.lo(starts), "hi": windows.hi(ends),
        "peak_w": np.maximum(np.maximum.reduceat(w, starts), p_lo),
    }, schema=RUN_SCHEMA)
    # a run of one lone sample right after a gap has no length: nothing to label
    return runs.filter(pl.col("hi") > pl.col("lo"))


PLATEAU_MIN_TDP = 0.15
"""A prefill must lift the GPU above its decode level by at least this share of its TDP (the high
level, 99th percentile, minus the larger of the idle and decode levels) to be told from decode
ripple and sensor noise. The fit captures clear it by far (h200-capture-2: 561 W = 0.80 TDP,
h200-capture-4: 713 W = 1.02 TDP); a workload whose prefills never load the GPU (a 45 M-parameter
decoder whose prefill passes take a few ms of GPU time: 3–6 W over 127 W) is refused, not guessed."""


def gpu_levels(power_w: np.ndarray, tdp_w: float) -> tuple[tuple[float, float, float] | None, bool]:
    """(idle_w, decode_w, high_w) of a GPU's finite samples (None where it has none), and whether
    every sample is finite: then they are :func:`detect_gpu`'s levels of the same samples too, so
    one computation serves :func:`unresolved` and the detector. A float32 ``power_w`` stays float32
    (the same levels as its float64 copy, with half the bytes to partition: _levels_unsorted)."""
    w = np.asarray(power_w)
    if w.dtype != np.float32:
        w = w.astype(np.float64, copy=False)
    finite = np.isfinite(w)
    whole = bool(finite.all())
    if not whole:
        w = w[finite]
    return (_levels_unsorted(w, tdp_w) if len(w) else None), whole


def unresolved(t_ns: np.ndarray, power_w: np.ndarray, tdp_w: float, interval_ns: int,
               levels: tuple[float, float, float] | None = None) -> str | None:
    """Why this GPU's prefills cannot be told from decode by its power alone (then no power-only
    prefill segments are emitted for it; its decode and idle runs still are), or None where they
    can: no prefill plateau stands out of decode by ``PLATEAU_MIN_TDP`` of the TDP. ``levels``:
    :func:`gpu_levels` of ``power_w`` when the caller has them already."""
    if not tdp_w or tdp_w <= 0:
        return None
    if levels is None:
        levels = gpu_levels(power_w, tdp_w)[0]
        if levels is None:
            return None
    idle_w, decode_w, high_w = levels
    lift = high_w - max(idle_w, decode_w)
    if lift < PLATEAU_MIN_TDP * tdp_w:
        return (f"no prefill plateau: the high level ({high_w:.0f} W) is {lift:.0f} W over decode ({max(idle_w, decode_w):.0f} W), "
                f"under {PLATEAU_MIN_TDP:.0%} of TDP ({PLATEAU_MIN_TDP * tdp_w:.0f} W)")
    return None
