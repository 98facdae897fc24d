"""Timing of the phase assets on a synthetic day: 8 endpoints × 4 GPUs at 10 Hz, ~1 request/s each.

    .venv/bin/python -m tests.bench_phases [DATA_DIR] [HOURS]

Not a test (pytest does not collect it): it writes ~28 M power rows and ~0.7 M requests, then
times each phase asset through the real runner (the power grid from power_100ms when it is
materialized, else the in-connection fallback).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from tests.builders import DAY, day_start_ns, power_table

ENDPOINTS, GPUS = 8, 4


def write_day(data_dir: Path, hours: float = 24, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    hosts = [{"name": f"infer-{e}", "role": "inference", "gpus": [{"index": g, "tdp_w": 700, "model": "H200"} for g in range(GPUS)],
              "endpoints": [{"name": f"ep-{e}", "gpus": list(range(GPUS))}]} for e in range(ENDPOINTS)]
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "bench", "clusters": [{"name": "c0", "hosts": hosts}]}]}), data_dir / "inventory.yaml")
    n_slots = int(hours * 36000)
    t0 = day_start_ns()
    total = 0
    for e in range(ENDPOINTS):
        n = rng.poisson(hours * 3600)
        arrival = np.sort(rng.uniform(0, n_slots - 400, n))  # in slots
        prefill = rng.uniform(1, 20, n)
        decode = rng.uniform(20, 200, n)
        ps, ft = arrival, arrival + prefill
        end = ft + decode
        n_pre = np.zeros(n_slots + 1)
        n_dec = np.zeros(n_slots + 1)
        np.add.at(n_pre, ps.astype(int), 1)
        np.add.at(n_pre, np.ceil(ft).astype(int), -1)
        np.add.at(n_dec, ft.astype(int), 1)
        np.add.at(n_dec, np.ceil(end).astype(int), -1)
        n_pre, n_dec = np.cumsum(n_pre)[:n_slots], np.cumsum(n_dec)[:n_slots]
        base = np.where(n_pre > 0, 760.0, np.where(n_dec > 0, 230 + 8 * n_dec, 120.0))
        t = t0 + np.arange(n_slots, dtype=np.int64) * 100_000_000 + 50_000_000
        for g in range(GPUS):
            p = base * rng.normal(1, 0.05, n_slots)
            write_dataset(power_table(f"infer-{e}", g, t, p), data_dir, "power", prefix=f"e{e}g{g}")
        ts = lambda slots: pa.array(t0 + (slots * 1e8).astype(np.int64)).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
        req = pa.table({
            "request_id": [f"{e}-{i}" for i in range(n)], "endpoint": [f"ep-{e}"] * n,
            "arrival_ts": ts(arrival), "prefill_start_ts": ts(ps), "first_token_ts": ts(ft), "end_ts": ts(end),
            "prompt_tokens": pa.array(rng.lognormal(7, 1, n).astype(np.int32) + 1),
            "output_tokens": pa.array(rng.lognormal(5, 1, n).astype(np.int32) + 1),
            "status": ["ok"] * n, "max_tokens": pa.nulls(n, pa.int32()),
            "replica": pa.nulls(n, pa.string()),
        }, schema=REQUESTS)
        write_dataset(req, data_dir, "requests", prefix=f"e{e}")
        total += n
    return total


def main() -> None:
    from pipeline.runner import run_day

    data_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wattline-bench-phases")
    hours = float(sys.argv[2]) if len(sys.argv) > 2 else 24
    if not (data_dir / "power").exists():
        t = time.perf_counter()
        n = write_day(data_dir, hours)
        print(f"wrote {ENDPOINTS}x{GPUS} GPUs x {hours:g} h at 10 Hz, {n} requests in {time.perf_counter() - t:.1f} s", flush=True)
    for asset in ("energy_curve", "phase_timeline", "phase_intervals", "phase_segments", "request_energy", "energy_per_token"):
        t, c = time.perf_counter(), time.process_time()
        outcome = run_day(data_dir, DAY.isoformat(), selection=[asset])
        print(f"{asset}: {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU, ok={outcome.success} {outcome.error or ''} "
              f"failed checks={[(c.check, c.description[:120]) for c in outcome.failed_checks]}", flush=True)


if __name__ == "__main__":
    main()
