"""A constructed endpoint with known phases: power is exactly P_PRE in prefill-labelled slots,
P_DEC (one request decoding) or P_DEC2 (two) in decode slots and P_IDLE otherwise, on 2 GPUs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from tests.builders import day_start_ns, power_table

P_PRE, P_DEC, P_DEC2, P_IDLE = 800.0, 300.0, 400.0, 100.0
SECONDS = 60
T0 = day_start_ns()

# request_id: (arrival, prefill_start or None, first_token, end, prompt_tokens, output_tokens), seconds after midnight
REQUESTS_S = {
    "A": (10.0, 10.0, 10.5, 14.5, 500, 100),
    "B": (11.9, 12.0, 12.2, 13.2, 200, 50),  # prefill and decode overlap A's decode (continuous batching)
    "C": (20.0, 20.05, 20.35, 21.35, 300, 10),  # boundaries off the 100 ms grid
    "D": (30.0, 30.0, 30.5, 31.0, 100, 20),
    "E": (30.2, None, 30.8, 31.5, 60, 30),  # no prefill_start: falls back to D's first token (30.5)
}


def endpoint_inventory(data_dir: Path, endpoint: str = "ep-a", gpus: int = 2, tdp_w: float = 700.0, model: str | None = "H200") -> None:
    gpu = {"tdp_w": tdp_w} | ({"model": model} if model else {})
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference",
        "gpus": [{"index": i, **gpu} for i in range(gpus)],
        "endpoints": [{"name": endpoint, "gpus": list(range(gpus))}],
    }]}]}]}
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")


def requests_table(rows: dict, endpoint: str = "ep-a", offset_s: float = 0.0) -> pa.Table:
    def ts(values):
        return pa.array([None if v is None else T0 + round((v + offset_s) * 1e9) for v in values], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))

    cols = list(zip(*rows.values(), strict=False))
    return pa.table({
        "request_id": list(rows),
        "endpoint": [endpoint] * len(rows),
        "arrival_ts": ts(cols[0]),
        "prefill_start_ts": ts(cols[1]),
        "first_token_ts": ts(cols[2]),
        "end_ts": ts(cols[3]),
        "prompt_tokens": pa.array(cols[4], pa.int32()),
        "output_tokens": pa.array(cols[5], pa.int32()),
        "status": ["ok"] * len(rows),
        "max_tokens": pa.nulls(len(rows), pa.int32()),
        "replica": pa.nulls(len(rows), pa.string()),
    }, schema=REQUESTS)


def slot_labels(rows: dict = REQUESTS_S, seconds: int = SECONDS) -> tuple[np.ndarray, np.ndarray]:
    """Per 100 ms slot: (n_prefill, n_decode), with D's fallback applied to E by hand."""
    n_pre = np.zeros(seconds * 10, int)
    n_dec = np.zeros(seconds * 10, int)
    for rid, (_arr, ps, ft, end, _, _) in rows.items():
        ps = 30.5 if rid == "E" else ps
        for a, b, n in ((ps, ft, n_pre), (ft, end, n_dec)):
            lo, hi = int(np.floor(round(a * 10, 6))), int(np.ceil(round(b * 10, 6)))
            n[lo:hi] += 1
    return n_pre, n_dec


def write_known_endpoint(data_dir: Path, request_offset_s: float = 0.0) -> np.ndarray:
    """Power at 10 Hz (one sample mid-slot) following the labels; returns the per-slot power."""
    endpoint_inventory(data_dir)
    n_pre, n_dec = slot_labels()
    power = np.where(n_pre > 0, P_PRE, np.where(n_dec > 1, P_DEC2, np.where(n_dec > 0, P_DEC, P_IDLE)))
    t = T0 + np.arange(len(power), dtype=np.int64) * 100_000_000 + 50_000_000
    for gpu in range(2):
        write_dataset(power_table("infer-0", gpu, t, power), data_dir, "power", prefix=f"infer-0-{gpu}")
    write_dataset(requests_table(REQUESTS_S, offset_s=request_offset_s), data_dir, "requests", prefix="req")
    return power
