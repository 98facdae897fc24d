"""Statistics of collector-shaped power rows, to compare the simulator with the real collector's files.

Used by tests/test_simulate_collector.py and bench/calibrate_simulator.py on one GPU's rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.contract import epoch_ns
from collectors.nvml.rows import BUFFER, FIELD


def _ns(t: pa.Table) -> np.ndarray:
    return epoch_ns(t.column("ts")).to_numpy().astype(np.int64)


def avg_lag_s(buffer_ts: np.ndarray, buffer_w: np.ndarray, field_ts: np.ndarray, field_avg_w: np.ndarray,
              window_ns: int = 1_000_000_000) -> float:
    """The lag (0–1.2 s, 20 ms steps) at which the buffer's trailing-``window_ns`` mean best matches
    ``power_avg_w`` (least median absolute error)."""
    csum = np.concatenate([[0.0], np.cumsum(buffer_w, dtype=np.float64)])
    ok0 = field_ts - buffer_ts[0] > window_ns + 1_300_000_000
    best = (np.inf, 0.0)
    for lag_ms in range(0, 1220, 20):
        lag = lag_ms * 1_000_000
        hi = np.searchsorted(buffer_ts, field_ts - lag, side="right")
        lo = np.searchsorted(buffer_ts, field_ts - lag - window_ns, side="right")
        ok = ok0 & (hi - lo > 10)
        err = float(np.median(np.abs((csum[hi] - csum[lo])[ok] / (hi - lo)[ok] - field_avg_w[ok])))
        best = min(best, (err, lag_ms / 1000))
    return best[1]


def collector_stats(power: pa.Table, host: str, gpu: int) -> dict[str, float]:
    """Row rates per source, buffer spacing, the energy and slow-field cadences and the avg1s lag of one GPU."""
    g = power.filter(pc.and_(pc.equal(power["host"], host), pc.equal(power["gpu"], gpu)))
    src = g.column("source").cast(pa.string())
    b = g.filter(pc.equal(src, BUFFER))
    f = g.filter(pc.equal(src, FIELD))
    bt, ft = np.sort(_ns(b)), _ns(f)
    order = np.argsort(ft)
    ft = ft[order]
    bw = b.sort_by("ts").column("power_w").to_numpy().astype(np.float64)
    fa = f.column("power_avg_w").to_numpy(zero_copy_only=False).astype(np.float64)[order]
    span_s = (max(bt[-1], ft[-1]) - min(bt[0], ft[0])) / 1e9
    gaps_ms = np.diff(bt) / 1e6
    e = f.filter(pc.is_valid(f["energy_j"]))
    s = f.filter(pc.is_valid(f["temp_c"]))
    return {
        "buffer_rows_per_s": len(bt) / span_s,
        "field_rows_per_s": len(ft) / span_s,
        "buffer_gap_median_ms": float(np.median(gaps_ms)),
        "buffer_gap_p10_ms": float(np.percentile(gaps_ms, 10)),
        "buffer_gap_p90_ms": float(np.percentile(gaps_ms, 90)),
        "field_gap_median_ms": float(np.median(np.diff(ft)) / 1e6),
        "energy_every_s": float(np.median(np.diff(np.sort(_ns(e)))) / 1e9),
        "slow_fields_every_s": float(np.median(np.diff(np.sort(_ns(s)))) / 1e9),
        "avg1s_lag_s": avg_lag_s(bt, bw, ft, fa),
    }
