"""Pipeline throughput: `wattline run` on N GPU-days at 10 Hz against two baselines on the same Parquet.

For each N: simulate N GPUs for one day (the simulator's writers), then time, as child
processes measured identically: the pipeline (all assets but the report), (a) the floor
(one DuckDB scan to per-GPU per-second means) and (b) a polars script computing the 2 s
rolling swing per GPU and the aggregates. Ratios are pipeline ÷ floor and baseline (b) ÷ pipeline.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow.parquet as pq

from bench.fleets import write_fleet
from bench.measure import run_measured, save

DATE = "2026-11-30"
HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def power_rows(data_dir: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in (data_dir / "power").rglob("*.parquet"))


def pipeline_assets() -> list[str]:
    from pipeline.definitions import defs

    job = defs.resolve_job_def("daily_job")
    return [n for n in job.graph.node_names() if n != "daily_report"]


def bench_size(n_gpus: int, work: Path) -> dict:
    data_dir = work / f"gpus-{n_gpus}"
    if not (data_dir / "power").exists():
        fleet = write_fleet(n_gpus, work / f"fleet-{n_gpus}.yaml")
        sim = run_measured("simulate", [str(BIN / "wattline"), "simulate", "--fleet", str(fleet), "--start", DATE, "--data-dir", str(data_dir)])
        assert sim.returncode == 0, "simulation failed"
    rows = power_rows(data_dir)
    wattline = [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir), "--timings"]
    pipeline = run_measured("pipeline", [*wattline, "--select", ",".join(pipeline_assets())])
    floor = run_measured("floor", [sys.executable, str(HERE / "baseline_floor.py"), str(data_dir), DATE])
    polars = run_measured("polars", [sys.executable, str(HERE / "baseline_polars.py"), str(data_dir), DATE])
    steps = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\S+)\s+([\d.]+) s$", pipeline.stdout, re.M)}
    result = {
        "gpu_days": n_gpus,
        "samples": rows,
        "pipeline": vars(pipeline) | {"stdout": None},
        "floor": vars(floor) | {"stdout": None},
        "baseline_polars": vars(polars) | {"stdout": None},
        "asset_seconds": steps,
        "pipeline_over_floor": pipeline.wall_s / floor.wall_s,
        "baseline_over_pipeline": polars.wall_s / pipeline.wall_s,
    }
    return result


def main(sizes: list[int], work: Path) -> dict:
    results = [bench_size(n, work) for n in sizes]
    print(f"{'GPU-days':>8} {'samples':>12} {'pipeline s':>10} {'cpu s':>7} {'RSS MB':>7} {'floor s':>8} {'polars s':>8} {'pipe/floor':>10} {'polars/pipe':>11}")
    for r in results:
        p = r["pipeline"]
        print(f"{r['gpu_days']:>8} {r['samples']:>12,} {p['wall_s']:>10.1f} {p['cpu_s']:>7.1f} {p['peak_rss_mb']:>7.0f} "
              f"{r['floor']['wall_s']:>8.1f} {r['baseline_polars']['wall_s']:>8.1f} {r['pipeline_over_floor']:>10.2f} {r['baseline_over_pipeline']:>11.2f}")
    by_n = {r["gpu_days"]: r for r in results}
    slope = None
    if 64 in by_n and 256 in by_n:
        slope = (by_n[256]["pipeline"]["wall_s"] - by_n[64]["pipeline"]["wall_s"]) / (256 - 64)
        print(f"slope 64→256: {slope:.2f} s per GPU-day")
    for r in results:
        top = sorted(r["asset_seconds"].items(), key=lambda kv: -kv[1])[:5]
        print(f"  {r['gpu_days']} GPU-days, slowest assets: " + ", ".join(f"{k} {v:.1f}s" for k, v in top))
    payload = {"results": results, "slope_s_per_gpu_day_64_256": slope}
    print(f"written {save('throughput', payload)}")
    return payload
