"""Pipeline throughput: `wattline run` on N GPU-days at 10 Hz against two baselines on the same Parquet.

For each N: simulate N GPUs for one day (the simulator's writers), then time, as child
processes measured identically: the pipeline (all assets but the report), (a) the floor
(one DuckDB scan to per-GPU per-second means) and (b) a polars script computing the 2 s
rolling swing per GPU and the aggregates. Ratios are pipeline ÷ floor and baseline (b) ÷ pipeline.

Apples to apples: baseline (b) computes only part of what the pipeline does, so the same run
also times the pipeline's own cost for what (b) computes, as one more `wattline run` of just the
assets that produce it (SUBSET: per-second means, the 100 ms grid, the per-GPU 2 s swing and the
per-GPU mean/max/p99), on the day the full run just materialized. That subset does a little more
than (b): swing_stats and power_summary also cover hosts, clusters, roles and the fleet (from
fleet_power_100ms, read, not recomputed). With two or more sizes, the slope (seconds per GPU-day)
between consecutive sizes and between the smallest and largest is printed for every contender.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from bench.fleets import write_fleet
from bench.measure import run_measured, save

DATE = "2026-11-30"
HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def power_rows(data_dir: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in (data_dir / "power").rglob("*.parquet"))


POLARS_RSS_CAP_FRACTION = 0.7
"""Baseline (b) is stopped past this share of the machine's RAM and reported as not finishing."""

SUBSET = ["power_1s", "power_100ms", "swing_stats", "power_summary"]
"""The assets that produce what baseline (b) computes (see the module docstring)."""


def pipeline_assets() -> list[str]:
    from pipeline.definitions import defs

    jobs = [defs.resolve_job_def(name) for name in ("cluster_day_job", "fleet_day_job")]
    keys = sorted(k.to_user_string() for job in jobs for k in job.asset_layer.selected_asset_keys)
    return [k for k in keys if k != "daily_report"]


def bench_size(n_gpus: int, work: Path, shape: str = "simple") -> dict:
    """``shape``: the simulator's ``--shape`` (``collector``: ~6× the rows, two sources per GPU)."""
    data_dir = work / (f"gpus-{n_gpus}" if shape == "simple" else f"gpus-{n_gpus}-{shape}")
    if not (data_dir / "power").exists():
        fleet = write_fleet(n_gpus, work / f"fleet-{n_gpus}.yaml")
        sim = run_measured("simulate", [str(BIN / "wattline"), "simulate", "--fleet", str(fleet), "--start", DATE,
                                        "--shape", shape, "--data-dir", str(data_dir)])
        assert sim.returncode == 0, "simulation failed"
    rows = power_rows(data_dir)
    wattline = [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir), "--timings"]
    pipeline = run_measured("pipeline", [*wattline, "--select", ",".join(pipeline_assets())])
    subset = run_measured("pipeline_subset", [*wattline, "--select", ",".join(SUBSET)])
    floor = run_measured("floor", [sys.executable, str(HERE / "baseline_floor.py"), str(data_dir), DATE])
    # (b) reads the whole day into memory: past the cap it would thrash or meet the OOM killer.
    polars = run_measured("polars", [sys.executable, str(HERE / "baseline_polars.py"), str(data_dir), DATE],
                          rss_cap_mb=POLARS_RSS_CAP_FRACTION * psutil.virtual_memory().total / 2**20)
    steps = _steps(pipeline.stdout)
    result = {
        "gpu_days": n_gpus,
        "shape": shape,
        "samples": rows,
        "pipeline": vars(pipeline) | {"stdout": None},
        "floor": vars(floor) | {"stdout": None},
        "baseline_polars": vars(polars) | {"stdout": None},
        "pipeline_subset": vars(subset) | {"stdout": None, "assets": SUBSET, "asset_seconds": _steps(subset.stdout)},
        "asset_seconds": steps,
        "pipeline_over_floor": pipeline.wall_s / floor.wall_s,
        "baseline_over_pipeline": polars.wall_s / pipeline.wall_s if polars.ok else None,
        "subset_over_floor": subset.wall_s / floor.wall_s,
        "baseline_over_subset": polars.wall_s / subset.wall_s if polars.ok else None,
        "subset_cpu_over_baseline_cpu": subset.cpu_s / polars.cpu_s if polars.ok else None,
    }
    return result


def _steps(stdout: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\S+)\s+([\d.]+) s$", stdout, re.M)}


CONTENDERS = [("pipeline", "pipeline"), ("subset", "pipeline_subset"), ("floor", "floor"), ("polars", "baseline_polars")]


def slopes(results: list[dict]) -> list[dict]:
    """Seconds (wall and CPU) per GPU-day between consecutive sizes, and between the smallest and largest."""
    ordered = sorted(results, key=lambda r: r["gpu_days"])
    pairs = list(zip(ordered, ordered[1:], strict=False))
    if len(ordered) > 2:
        pairs.append((ordered[0], ordered[-1]))
    out = []
    for a, b in pairs:
        dn = b["gpu_days"] - a["gpu_days"]
        row = {"from": a["gpu_days"], "to": b["gpu_days"]}
        for short, key in CONTENDERS:
            done = all(r[key]["returncode"] == 0 and r[key].get("killed_over_mb") is None for r in (a, b))
            row[f"{short}_wall_s_per_gpu_day"] = (b[key]["wall_s"] - a[key]["wall_s"]) / dn if done else None
            row[f"{short}_cpu_s_per_gpu_day"] = (b[key]["cpu_s"] - a[key]["cpu_s"]) / dn if done else None
        out.append(row)
    return out


def main(sizes: list[int], work: Path, shape: str = "simple") -> dict:
    results = [bench_size(n, work, shape) for n in sizes]
    print(f"{'GPU-days':>8} {'samples':>12} {'contender':<26} {'wall s':>8} {'cpu s':>8} {'RSS MB':>7} {'÷ floor':>8} {'polars ÷':>8}")
    for r in results:
        floor_wall = r["floor"]["wall_s"]
        polars_ok = r["baseline_polars"]["killed_over_mb"] is None and r["baseline_polars"]["returncode"] == 0
        polars_wall = r["baseline_polars"]["wall_s"]
        rows = [("pipeline (all assets)", r["pipeline"]), ("pipeline, what (b) computes", r["pipeline_subset"]),
                ("(a) floor", r["floor"]), ("(b) polars", r["baseline_polars"])]
        for i, (label, m) in enumerate(rows):
            head = f"{r['gpu_days']:>8} {r['samples']:>12,}" if i == 0 else " " * 21
            vs_polars = f"{polars_wall / m['wall_s']:>8.2f}" if polars_ok else f"{'—':>8}"
            print(f"{head} {label:<26} {m['wall_s']:>8.1f} {m['cpu_s']:>8.1f} {m['peak_rss_mb']:>7.0f} "
                  f"{m['wall_s'] / floor_wall:>8.2f} {vs_polars}")
        if polars_ok:
            print(f"{'':21} subset = {', '.join(SUBSET)}: CPU {r['subset_cpu_over_baseline_cpu']:.2f} × polars'")
        else:
            p = r["baseline_polars"]
            why = f"killed at {p['killed_over_mb'] / 1024:.1f} GB RSS" if p["killed_over_mb"] else f"exit {p['returncode']}"
            print(f"{'':21} (b) polars did not finish: {why} (it reads the whole day into memory)")
    slope_rows = slopes(results)
    for row in slope_rows:
        print(f"slope {row['from']}→{row['to']} GPU-days (s per GPU-day, wall / cpu): "
              + ", ".join(f"{short} {row[f'{short}_wall_s_per_gpu_day']:.2f} / {row[f'{short}_cpu_s_per_gpu_day']:.2f}"
                          if row[f"{short}_wall_s_per_gpu_day"] is not None else f"{short} —" for short, _ in CONTENDERS))
    for r in results:
        top = sorted(r["asset_seconds"].items(), key=lambda kv: -kv[1])[:5]
        print(f"  {r['gpu_days']} GPU-days, slowest assets: " + ", ".join(f"{k} {v:.1f}s" for k, v in top))
    by_n = {r["gpu_days"]: r for r in results}
    slope = None
    if 64 in by_n and 256 in by_n:
        slope = (by_n[256]["pipeline"]["wall_s"] - by_n[64]["pipeline"]["wall_s"]) / (256 - 64)
    payload = {"results": results, "slopes": slope_rows, "slope_s_per_gpu_day_64_256": slope}
    print(f"written {save('throughput' if shape == 'simple' else f'throughput-{shape}', payload)}")
    return payload
