"""Power-only segmentation vs vLLM's engine counters (runs without per-request logs).

The engine samples its Prometheus counters every ~250 ms; an interval in which
`prompt_tokens_total` grew had prefill work in it. We score power-detected prefill slots
(phase_timeline.power_phase) against those intervals:
- precision: share of power-prefill slots that fall in an interval with new prompt tokens;
- interval recall: share of such intervals holding at least one power-prefill slot;
- token recall: the same weighted by the interval's new prompt tokens (big prefills matter more);
- prefill seconds: power-detected vs the engine's request_prefill_time_seconds_sum increase
  (the engine sums over concurrent requests, so it can exceed wall time).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def engine_agreement(timeline: pl.DataFrame, engine: pl.DataFrame) -> dict:
    t = timeline.sort("ts").select(
        (pl.col("ts").dt.epoch("ns") // 100_000_000).alias("slot"), (pl.col("power_phase") == "prefill").alias("pre")
    )
    e = engine.sort("timestamp").with_columns(
        pl.col("prompt_tokens_total").diff().alias("new_tokens"),
        pl.col("request_prefill_time_seconds_sum").diff().alias("prefill_s"),
        (pl.col("timestamp") * 10).floor().cast(pl.Int64).alias("hi"),
    ).with_columns(pl.col("hi").shift(1).alias("lo")).drop_nulls(["lo", "new_tokens"])
    slots = t["slot"].to_numpy()
    pre = t["pre"].fill_null(False).to_numpy()
    # Each slot belongs to the engine interval (lo, hi] that contains it.
    idx = np.searchsorted(e["hi"].to_numpy(), slots, side="left")
    inside = (idx < e.height) & (slots > e["lo"].to_numpy()[np.minimum(idx, e.height - 1)])
    new_tokens = e["new_tokens"].to_numpy()
    busy_slot = np.zeros(len(slots), bool)
    busy_slot[inside] = new_tokens[idx[inside]] > 0
    detected = np.zeros(e.height, bool)
    np.logical_or.at(detected, idx[inside & pre], True)
    busy = new_tokens > 0
    return {
        "precision": float((pre & busy_slot).sum() / max(pre[inside].sum(), 1)),
        "interval_recall": float((detected & busy).sum() / max(busy.sum(), 1)),
        "token_recall": float(new_tokens[detected & busy].sum() / max(new_tokens[busy].sum(), 1)),
        "power_prefill_s": float(pre.sum() / 10),
        "engine_prefill_s": float(e["prefill_s"].sum()),
        "engine_busy_intervals": int(busy.sum()),
    }
