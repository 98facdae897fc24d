"""Scale-out: cluster-days per minute with 1 and 2 worker processes on this machine, and the
projected fleet-day for 10,000 GPUs on K workers (with its arithmetic).

One simulated day of C clusters of G GPUs (8 per host) is built with `wattline run --workers W`
for each W, as a child process measured like every other benchmark. The cluster-day phase and
the fleet-day phase are timed from Dagster's own run records (start and end of each run).
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from pathlib import Path

import yaml

from bench.fleets import fleet_of
from bench.measure import run_measured, save

DATE = "2026-11-30"
BIN = Path(sys.executable).parent
FLEET_GPUS = 10_000
PROJECTION_CLUSTER_GPUS = 64
PROJECTION_WORKERS = (1, 8, 32, 64, 157)


def _fleet(clusters: int, gpus_per_cluster: int) -> dict:
    inventory = fleet_of(clusters * gpus_per_cluster)
    hosts = [h for c in inventory["fleets"][0]["clusters"] for h in c["hosts"]]
    per = gpus_per_cluster // 8
    inventory["fleets"][0]["clusters"] = [{"name": f"c{i}", "hosts": hosts[i * per:(i + 1) * per]} for i in range(clusters)]
    return inventory


def _phases(data_dir: Path, run_ids: int) -> dict:
    """Wall seconds of the cluster-day phase (first start to last end) and of the fleet-day run."""
    import os

    from dagster import DagsterInstance

    from pipeline.runner import dagster_home

    os.environ["DAGSTER_HOME"] = str(dagster_home(data_dir))  # its dagster.yaml reads the storage dir from it
    with DagsterInstance.from_config(str(dagster_home(data_dir))) as instance:
        records = instance.get_run_records(limit=run_ids)
    cluster = [r for r in records if r.dagster_run.job_name == "cluster_day_job"]
    fleet = [r for r in records if r.dagster_run.job_name == "fleet_day_job"]
    return {
        "cluster_phase_s": max(r.end_time for r in cluster) - min(r.start_time for r in cluster),
        "cluster_day_run_s": [r.end_time - r.start_time for r in cluster],
        "fleet_phase_s": sum(r.end_time - r.start_time for r in fleet),
    }


def main(work: Path, clusters: int = 4, gpus_per_cluster: int = 8, workers: tuple[int, ...] = (1, 2)) -> dict:
    raw = work / f"scaling-{clusters}x{gpus_per_cluster}"
    if not (raw / "power").exists():
        fleet = work / f"scaling-{clusters}x{gpus_per_cluster}.yaml"
        fleet.write_text(yaml.safe_dump(_fleet(clusters, gpus_per_cluster), sort_keys=False))
        sim = run_measured("simulate", [str(BIN / "wattline"), "simulate", "--fleet", str(fleet), "--start", DATE, "--data-dir", str(raw)])
        assert sim.returncode == 0, "simulation failed"
    results = []
    for w in workers:
        data_dir = work / f"scaling-run-w{w}"
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.copytree(raw, data_dir, ignore=shutil.ignore_patterns("derived", ".dagster", "warehouse.duckdb", "*.lock"))
        argv = [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir), "--workers", str(w), "--timings"]
        m = run_measured(f"workers-{w}", argv)
        assert m.returncode in (0, 1), f"run failed with {w} workers"
        phases = _phases(data_dir, clusters + 1)
        steps = {g.group(1): float(g.group(2)) for g in re.finditer(r"^\s+(\S+)\s+([\d.]+) s$", m.stdout, re.M)}
        results.append({"workers": w, **vars(m), "stdout": None, **phases, "steps": steps,
                        "cluster_days_per_min": clusters / (phases["cluster_phase_s"] / 60)})
    corr_s = _step_seconds(results[0], "cluster_correlation")
    payload = {"clusters": clusters, "gpus_per_cluster": gpus_per_cluster, "gpu_days": clusters * gpus_per_cluster,
               "results": results, "projection": projection(results, clusters, gpus_per_cluster, corr_s)}
    _print(payload)
    print(f"written {save('scaling', payload)}")
    return payload


def _step_seconds(result: dict, step: str) -> float:
    return float(result.get("steps", {}).get(step, 0.0))


def projection(results: list[dict], clusters: int, gpus_per_cluster: int, corr_s: float) -> dict:
    """Fleet-day time for 10,000 GPUs in clusters of 64 on K workers of this machine's size.

    A cluster-day costs what one run took here, scaled linearly by GPUs (the throughput
    benchmark checks that cost is linear in GPU-days); the fleet-day's rollups grow with the
    number of clusters C, its cluster_correlation with C²."""
    one = next(r for r in results if r["workers"] == 1)
    per_cluster_day = sum(one["cluster_day_run_s"]) / clusters * (PROJECTION_CLUSTER_GPUS / gpus_per_cluster)
    c = math.ceil(FLEET_GPUS / PROJECTION_CLUSTER_GPUS)
    rollup = max(one["fleet_phase_s"] - corr_s, 0.0) * c / clusters
    corr = corr_s * (c * (c - 1)) / (clusters * (clusters - 1))
    rows = {k: math.ceil(c / k) * per_cluster_day + rollup + corr for k in PROJECTION_WORKERS}
    return {
        "fleet_gpus": FLEET_GPUS, "cluster_gpus": PROJECTION_CLUSTER_GPUS, "clusters": c,
        "cluster_day_s": per_cluster_day, "fleet_rollup_s": rollup, "cluster_correlation_s": corr,
        "fleet_day_s_by_workers": rows,
        "arithmetic": (f"T(K) = ceil({c} / K) × {per_cluster_day:.0f} s (one {PROJECTION_CLUSTER_GPUS}-GPU cluster-day) "
                       f"+ {rollup:.0f} s (rollups, linear in clusters) + {corr:.0f} s (cluster_correlation, C²)"),
    }


def _print(payload: dict) -> None:
    print(f"{payload['clusters']} clusters × {payload['gpus_per_cluster']} GPUs = {payload['gpu_days']} GPU-days")
    print(f"{'workers':>7} {'wall s':>7} {'cpu s':>7} {'RSS MB':>7} {'cluster phase s':>15} {'fleet phase s':>13} {'cluster-days/min':>16}")
    for r in payload["results"]:
        print(f"{r['workers']:>7} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['peak_rss_mb']:>7.0f} {r['cluster_phase_s']:>15.1f} "
              f"{r['fleet_phase_s']:>13.1f} {r['cluster_days_per_min']:>16.2f}")
    p = payload["projection"]
    print(f"projection, {p['fleet_gpus']:,} GPUs = {p['clusters']} clusters of {p['cluster_gpus']}: {p['arithmetic']}")
    for k, s in p["fleet_day_s_by_workers"].items():
        print(f"  K = {k:>3} workers: {s / 60:7.1f} min")
