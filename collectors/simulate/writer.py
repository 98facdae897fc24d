"""Arrow tables in the data contract's shape, written through the atomic Parquet sink.

File names are fixed per host and dataset (``unique_names=False``), so the same seed rewrites
byte-identical files and a rerun replaces rather than duplicates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.contract import POWER, REQUESTS, JOB_EVENTS, TS
from collectors.parquet_sink import write_dataset
from collectors.simulate.power import GpuReadings

PREFIX = "sim"
POWER_LIMIT_W = 700.0


def _repeat_str(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


def power_table(host: str, gpus: list[tuple[int, str, GpuReadings]]) -> pa.Table:
    """One host's rows, already in (gpu, ts) order so the sink need not sort 7 M rows."""
    gpus = sorted(gpus, key=lambda g: g[0])
    counts = [len(r.ts_ns) for _, _, r in gpus]
    n = sum(counts)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(r, name) for _, _, r in gpus])

    uuid_idx = np.repeat(np.arange(len(gpus), dtype=np.int32), counts)
    columns = {
        "ts": pa.array(cat("ts_ns"), type=pa.int64()).cast(TS),
        "host": _repeat_str(host, n).cast(pa.string()),
        "gpu": pa.array(np.repeat(np.array([g for g, _, _ in gpus], np.uint8), counts)),
        "gpu_uuid": pa.DictionaryArray.from_arrays(pa.array(uuid_idx), pa.array([u for _, u, _ in gpus])).cast(pa.string()),
        "power_w": cat("power_w"),
        "power_avg_w": cat("power_avg_w"),
        "energy_j": cat("energy_j"),
        "sm_clock_mhz": cat("sm_clock_mhz"),
        "gpu_util_pct": cat("gpu_util_pct"),
        "mem_used_mib": cat("mem_used_mib"),
        "temp_c": cat("temp_c"),
        "power_limit_w": np.full(n, POWER_LIMIT_W, np.float32),
        "source": _repeat_str("simulated", n),
    }
    return pa.table({f.name: columns[f.name] for f in POWER}, schema=POWER)


def _ts(epoch_ns: int, s: np.ndarray) -> pa.Array:
    return pa.array(epoch_ns + np.rint(np.asarray(s) * 1e9).astype(np.int64), type=pa.int64()).cast(TS)


def requests_table(epoch_ns: int, cols: dict[str, np.ndarray]) -> pa.Table:
    return pa.table(
        {
            "request_id": pa.array(cols["request_id"], pa.string()),
            "endpoint": pa.array(cols["endpoint"], pa.string()),
            "arrival_ts": _ts(epoch_ns, cols["arrival_s"]),
            "prefill_start_ts": _ts(epoch_ns, cols["prefill_start_s"]),
            "first_token_ts": _ts(epoch_ns, cols["first_token_s"]),
            "end_ts": _ts(epoch_ns, cols["end_s"]),
            "prompt_tokens": pa.array(cols["prompt_tokens"], pa.int32()),
            "output_tokens": pa.array(cols["output_tokens"], pa.int32()),
            "status": pa.array(cols["status"], pa.string()),
        },
        schema=REQUESTS,
    )


def job_events_table(epoch_ns: int, cols: dict[str, np.ndarray]) -> pa.Table:
    return pa.table(
        {
            "job": pa.array(cols["job"], pa.string()),
            "host": pa.array(cols["host"], pa.string()),
            "step": pa.array(cols["step"], pa.int64()),
            "kind": pa.array(cols["kind"], pa.string()),
            "start_ts": _ts(epoch_ns, cols["start_s"]),
            "end_ts": _ts(epoch_ns, cols["end_s"]),
            "tokens": pa.array(cols["tokens"], pa.int64()),
        },
        schema=JOB_EVENTS,
    )


def write(table: pa.Table, data_dir: Path, dataset: str, prefix: str = PREFIX, sort_by: list[str] | None = None) -> list[Path]:
    return write_dataset(table, data_dir, dataset, prefix=prefix, sort_by=sort_by, unique_names=False)
