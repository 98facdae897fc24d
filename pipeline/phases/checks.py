"""Checks of the phase tables, run inside the asset that owns them (per partition).

- clock_skew (phase_timeline): request timestamps vs power timestamps, from how the request-based
  prefill indicator lines up with the power trace (cross-correlation over ±5 s).
- power_segmentation_agreement (phase_segments): power-only vs request-based prefill time.
"""

from __future__ import annotations

import numpy as np
from dagster import AssetCheckResult, AssetCheckSeverity

from pipeline.checks import Check

SKEW_MAX_LAG_SLOTS = 50  # ±5 s
SKEW_WARN_MS = 500
PRECISION_MIN = 0.7
RECALL_MIN = 0.5
"""Recall may be lower than precision: a prefill shorter than a slot labels the whole slot but barely
moves its mean power (simulated demo at night: recall 0.56-0.77 of time, most of the energy)."""


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


def clock_skew(con) -> AssetCheckResult:
    rows = con.execute(
        """
        WITH first_gpu AS (SELECT endpoint, min((host, gpu)) AS hg FROM phase_timeline
                           WHERE date = getvariable('partition_date') AND phase IS NOT NULL GROUP BY ALL)
        SELECT t.endpoint, list(t.power_w ORDER BY t.ts), list(t.phase = 'prefill' ORDER BY t.ts)
        FROM phase_timeline t JOIN first_gpu f ON t.endpoint = f.endpoint AND (t.host, t.gpu) = f.hg
        WHERE t.date = getvariable('partition_date')
        GROUP BY ALL ORDER BY 1
        """
    ).fetchall()
    found = {}
    for endpoint, power, prefill in rows:
        prefill = np.array(prefill, dtype=bool)
        if prefill.sum() < 5 or len(prefill) < 4 * SKEW_MAX_LAG_SLOTS:
            continue
        offset, c_best, c_zero = estimate_offset_ms(np.array(power, dtype=float), prefill)
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


AGREEMENT_SQL = """
WITH slots AS (
    SELECT endpoint,
           count(*) FILTER (WHERE phase = 'prefill' AND power_phase = 'prefill') AS both_,
           count(*) FILTER (WHERE power_phase = 'prefill') AS power_,
           count(*) FILTER (WHERE phase = 'prefill') AS req_,
           sum(energy_j) FILTER (WHERE phase = 'prefill' AND power_phase = 'prefill')
               / nullif(sum(energy_j) FILTER (WHERE phase = 'prefill'), 0) AS energy_recall
    FROM phase_timeline WHERE date = getvariable('partition_date') AND phase IS NOT NULL
    GROUP BY ALL
),
b AS (  -- boundaries (starts and ends) of prefill segments per GPU and source
    SELECT endpoint, host, gpu, source, kind, epoch_ms(t) AS t
    FROM phase_segments
    UNPIVOT (t FOR kind IN (start_ts, end_ts))
    WHERE date = getvariable('partition_date') AND phase = 'prefill'
),
r AS (SELECT * FROM b WHERE source = 'requests'),
p AS (SELECT * FROM b WHERE source = 'power'),
err AS (
    SELECT r.endpoint, least(abs(r.t - lo.t), abs(hi.t - r.t)) AS err_ms
    FROM r
    ASOF LEFT JOIN p AS lo ON r.endpoint = lo.endpoint AND r.host = lo.host AND r.gpu = lo.gpu AND r.kind = lo.kind AND r.t >= lo.t
    ASOF LEFT JOIN p AS hi ON r.endpoint = hi.endpoint AND r.host = hi.host AND r.gpu = hi.gpu AND r.kind = hi.kind AND r.t <= hi.t
)
SELECT s.endpoint,
       s.both_ / nullif(s.power_, 0) AS precision_,
       s.both_ / nullif(s.req_, 0) AS recall,
       (SELECT median(err_ms) FROM err WHERE err.endpoint = s.endpoint) AS median_boundary_error_ms,
       s.energy_recall
FROM slots AS s ORDER BY 1
"""


def segmentation_agreement(con) -> list[tuple]:
    """Per endpoint with a request log: (endpoint, precision, recall, median boundary error ms) of
    power-only prefill time against the request labels."""
    return [r[:4] for r in con.execute(AGREEMENT_SQL).fetchall()]


def power_segmentation_agreement(con) -> AssetCheckResult:
    figures = {
        e: {"precision": round(p or 0, 3), "recall": round(r or 0, 3), "median_boundary_error_ms": None if m is None else round(m),
            "energy_recall": round(er or 0, 3)}
        for e, p, r, m, er in con.execute(AGREEMENT_SQL).fetchall()
    }
    low = [e for e, v in figures.items() if v["precision"] < PRECISION_MIN or v["recall"] < RECALL_MIN]
    return AssetCheckResult(
        check_name="power_segmentation_agreement",
        passed=not low,
        severity=AssetCheckSeverity.WARN,
        metadata={"endpoints_compared": len(figures), "agreement": str(figures)},
        description=f"power-only prefill detection disagrees with the request log (precision < {PRECISION_MIN} or recall < {RECALL_MIN}) on {', '.join(low)}" if low else None,
    )


TIMELINE_CHECKS = [
    Check("clock_skew", "Request timestamps line up with the power trace (prefill-spike cross-correlation; WARN if offset ≥ 0.5 s).", lambda con: clock_skew(con)),
]
SEGMENT_CHECKS = [
    Check("power_segmentation_agreement", "Power-only prefill detection agrees with the request log (precision ≥ 0.7 and recall ≥ 0.5 of prefill time; median boundary error and energy recall reported).", lambda con: power_segmentation_agreement(con)),
]
