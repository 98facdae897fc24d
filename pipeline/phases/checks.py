"""The phase tables' checks that SQL alone cannot do (named hooks of their Table declarations in
pipeline/assets/inference_phases.py; the others are files in sql/<table>/checks/).

- clock_skew (phase_timeline): request timestamps vs power timestamps, from how the request-based
  prefill indicator lines up with the power trace (cross-correlation over ±5 s).
- power_segmentation_agreement (phase_segments): power-only vs request-based prefill time.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from dagster import AssetCheckResult, AssetCheckSeverity

SKEW_MAX_LAG_SLOTS = 50  # ±5 s
SKEW_WARN_MS = 500
PRECISION_MIN = 0.7
RECALL_MIN = 0.5
"""Of prefill time, at native resolution (the segments' own instants). Measured: h200-capture-2
(20 ms buffer) and h200-capture-4 pass (docs/phases.md); capture 2 with its requests shifted by
0.5 s fails."""


def estimate_offset_ms(power_w: np.ndarray, prefill: np.ndarray, max_lag: int = SKEW_MAX_LAG_SLOTS) -> tuple[float, float, float]:
    """(offset_ms, corr_at_offset, corr_at_zero): request time minus power time, from the lag that
    maximises the correlation of the prefill indicator with power shifted by that lag."""
    p = np.nan_to_num(power_w - np.nanmean(power_w))
    x = prefill.astype(float) - prefill.mean()
    n = len(p)
    norm = np.sqrt((p * p).sum() * (x * x).sum()) or 1.0
    corr = {}
    for lag in range(-max_lag, max_lag + 1):
        # corr(x[t], p[t + lag])
        if lag >= 0:
            corr[lag] = float((x[: n - lag] * p[lag:]).sum()) / norm
        else:
            corr[lag] = float((x[-lag:] * p[: n + lag]).sum()) / norm
    best = max(corr, key=corr.get)
    return -best * 100.0, corr[best], corr[0]


SKEW_GPUS_SQL = """
-- each logged endpoint's first GPU (host, gpu order) in phase_timeline: its distinct GPUs first (a
-- hash of three keys per slot), then the first of each endpoint's few; an arg_min keyed by a
-- (host, gpu) struct built and compared a struct per slot
SELECT endpoint, host, gpu FROM (
    SELECT DISTINCT endpoint, host, gpu FROM phase_timeline WHERE date = getvariable('partition_date') AND phase IS NOT NULL
)
QUALIFY row_number() OVER (PARTITION BY endpoint ORDER BY host, gpu) = 1
ORDER BY 1
"""
SKEW_SLOTS_SQL = """
SELECT power_w::DOUBLE AS power_w, phase = 'prefill' AS prefill FROM phase_timeline
WHERE date = getvariable('partition_date') AND endpoint = $endpoint AND host = $host AND gpu = $gpu ORDER BY ts
"""


def clock_skew(con) -> AssetCheckResult:
    """WARN where an endpoint's request timestamps look offset from its power: per logged endpoint,
    on its first GPU's 100 ms slots, the lag that best lines the request-based prefill label up with
    power (estimate_offset_ms). Each GPU's slots come as arrays (a NULL power as NaN, a NULL label
    as not prefill), not as lists of Python values."""
    found = {}
    for endpoint, host, gpu in con.execute(SKEW_GPUS_SQL).fetchall():
        got = con.execute(SKEW_SLOTS_SQL, {"endpoint": endpoint, "host": host, "gpu": gpu}).fetchnumpy()
        prefill = np.ma.filled(np.ma.asarray(got["prefill"]), False).astype(bool)
        if prefill.sum() < 5 or len(prefill) < 4 * SKEW_MAX_LAG_SLOTS:
            continue
        offset, c_best, c_zero = estimate_offset_ms(np.ma.filled(np.ma.asarray(got["power_w"]).astype(float), np.nan), prefill)
        found[endpoint] = {"offset_ms": offset, "corr": round(c_best, 3), "corr_at_0": round(c_zero, 3)}
    skewed = {e: v for e, v in found.items() if abs(v["offset_ms"]) >= SKEW_WARN_MS}
    return AssetCheckResult(
        check_name="clock_skew",
        passed=not skewed,
        severity=AssetCheckSeverity.WARN,
        metadata={"endpoints_checked": len(found), "endpoints_skewed": len(skewed), "estimated_offsets": str(found)},
        description=(
            "request timestamps look offset from power: "
            + ", ".join(f"{e} by {v['offset_ms']:+.0f} ms" for e, v in skewed.items())
            + " (prefill energy is mis-attributed until the clocks are aligned)"
        ) if skewed else None,
    )


def over_power_gpus(con, power_gpus: pl.DataFrame, sql: str) -> list[tuple]:
    """``sql``'s rows over the step's per-GPU power facts as relation `_power_gpus`, on a cursor of
    ``con`` (whose own last result may still be open: the headline's)."""
    cur = con.cursor()
    try:
        cur.register("_power_gpus", power_gpus.to_arrow())
        return cur.execute(sql).fetchall()
    finally:
        cur.close()


PREFILL_SEGMENTS_SQL = """
-- one GPU's prefill segments and its logged busy ones; no string column: fetchnumpy would make a
-- Python string of each row's
SELECT source = 'requests' AS req, phase = 'prefill' AS pre, epoch_ns(start_ts) AS a, epoch_ns(end_ts) AS b
FROM phase_segments
WHERE date = getvariable('partition_date') AND endpoint = $endpoint AND host = $host AND gpu = $gpu
  AND (phase = 'prefill' OR (source = 'requests' AND phase <> 'idle'))
ORDER BY a
"""
LOGGED_GPUS_SQL = """
SELECT DISTINCT endpoint, host, gpu FROM phase_segments
WHERE date = getvariable('partition_date') AND source = 'requests' AND phase <> 'idle' ORDER BY ALL
"""


def _covered(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length (ns) of the disjoint sorted intervals [a, b) that lies before each x."""
    done = np.concatenate([[0], np.cumsum(b - a)])
    i = np.searchsorted(a, x, side="right")  # intervals starting at or before x
    j = np.maximum(i - 1, 0)
    part = np.where(i > 0, np.clip(x - a[j], 0, (b - a)[j]), 0) if len(a) else np.zeros(len(x), dtype=np.int64)
    return done[j] + part if len(a) else part


def _nearest(ref: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Distance (ns) from each t to the nearest element of the sorted ``ref``."""
    i = np.searchsorted(ref, t)
    lo = np.abs(t - ref[np.maximum(i - 1, 0)])
    hi = np.abs(ref[np.minimum(i, len(ref) - 1)] - t)
    return np.minimum(lo, hi)


def agreement_rows(con) -> list[tuple]:
    """Per endpoint with logged prefills: (endpoint, precision, recall, median boundary error ms, IoU,
    logged median prefill ms), per GPU in numpy on the prefill segments (runs of one source are
    disjoint, so prefill time is a sum of lengths and the overlap a difference of covered lengths at
    the request runs' ends; the boundary error a sorted search among the power runs' boundaries of
    the same kind). The same figures as the SQL windows it replaced (a sweep and two framed windows
    over every boundary: 1.2 s CPU at 8 GPUs x 6 h, this 0.26 s; identical values on that data)."""
    tot: dict[str, list] = {}
    for e, host, gpu in con.execute(LOGGED_GPUS_SQL).fetchall():  # one GPU at a time: memory of one GPU's segments
        seg = con.sql(PREFILL_SEGMENTS_SQL, params={"endpoint": e, "host": host, "gpu": gpu}).fetchnumpy()
        req, pre = np.asarray(seg["req"], dtype=bool), np.asarray(seg["pre"], dtype=bool)
        a, b = np.asarray(seg["a"], dtype=np.int64), np.asarray(seg["b"], dtype=np.int64)
        lo, hi = a[req].min(), b[req].max()  # the GPU's logged busy span
        ra, rb = a[req & pre], b[req & pre]
        p = ~req & (b > lo) & (a < hi)
        pa, pb = np.maximum(a[p], lo), np.minimum(b[p], hi)
        t = tot.setdefault(e, [0, 0, 0, [], []])
        t[0] += int((rb - ra).sum())
        t[1] += int((pb - pa).sum())
        t[2] += int((_covered(pa, pb, rb) - _covered(pa, pb, ra)).sum())
        if len(pa):
            t[3].append(np.concatenate([_nearest(pa, ra), _nearest(pb, rb)]) / 1e6)
        t[4].append(rb - ra)
    out = []
    for e in sorted(tot):
        req_ns, pow_ns, inter, errs, lengths = tot[e]
        lengths = np.concatenate(lengths)
        if not len(lengths):
            continue  # no logged prefill on this endpoint
        err = np.concatenate(errs) if errs else np.empty(0)
        out.append((
            e, inter / pow_ns if pow_ns else None, inter / req_ns if req_ns else None,
            float(np.median(err)) if len(err) else None,
            inter / (req_ns + pow_ns - inter) if req_ns + pow_ns - inter else None,
            float(np.median(lengths)) / 1e6,
        ))
    return out


def segmentation_agreement(con) -> list[tuple]:
    """Per endpoint with a request log: (endpoint, precision, recall, median boundary error ms) of
    power-only prefill time against the request-based prefill segments, at native resolution (the
    segments' own instants; power-only prefills clipped to the log's busy span)."""
    return [r[:4] for r in agreement_rows(con)]


def power_segmentation_agreement(con, power_gpus: pl.DataFrame) -> AssetCheckResult:
    """Compared where both sources exist, at their own instants. An endpoint whose power source
    cannot resolve its prefills (a 1 s average or samples more than 300 ms apart: no power-only
    segments; or samples more than half the logged median prefill apart) is not a disagreement: the check passes for it and says so, with the
    sample interval and the logged median prefill, because WARNing there would flag every 10 Hz
    or 1 s source forever for what it is (the old 100 ms check did, 4+4 rows on the demo) while
    there is no power-only label to mislead anyone. It still WARNs where power-only segments exist
    and disagree with the log. ``power_gpus``: the step's per-GPU power facts (its source, sample
    interval, whether it resolves prefills: inference_phases._power_gpus_frame)."""
    resolution = over_power_gpus(
        con, power_gpus,
        "SELECT endpoint, bool_or(resolvable), max(sample_interval_ms), bool_or(is_average), min(unresolved) FROM _power_gpus GROUP BY ALL",
    )
    rows = {r[0]: r for r in agreement_rows(con)}
    figures, unresolved = {}, {}
    for endpoint, resolvable, interval_ms, is_average, why in resolution:
        if endpoint not in rows:
            continue  # no request log: nothing to compare with
        _, p, r, m, iou, median_ms = rows[endpoint]
        if not resolvable or interval_ms > median_ms / 2:
            unresolved[endpoint] = (
                f"{endpoint}: prefills (logged median {median_ms:.0f} ms) cannot be resolved at {interval_ms:.0f} ms"
                + (" (a 1 s average)" if is_average else "") + (f" ({why})" if why and not resolvable else "")
            )
            continue
        figures[endpoint] = {"precision": round(p or 0, 3), "recall": round(r or 0, 3), "iou": round(iou or 0, 3),
                             "median_boundary_error_ms": None if m is None else round(m)}
    low = [e for e, v in figures.items() if v["precision"] < PRECISION_MIN or v["recall"] < RECALL_MIN]
    notes = []
    if low:
        notes.append(f"power-only prefill detection disagrees with the request log (precision < {PRECISION_MIN} or recall < {RECALL_MIN}) on {', '.join(low)}")
    if unresolved:
        notes.append("not compared: " + "; ".join(unresolved.values()))
    return AssetCheckResult(
        check_name="power_segmentation_agreement",
        passed=not low,
        severity=AssetCheckSeverity.WARN,
        metadata={"endpoints_compared": len(figures), "agreement": str(figures), "not_resolvable": str(sorted(unresolved))},
        description=". ".join(notes) or None,
    )
