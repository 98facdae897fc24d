"""CPU seconds per GPU-day of the power, swing and phase assets on collector-shaped data: the
h200-capture-4 collector output (nvml-buffer ~50 Hz + nvml-field 10 Hz with the 1 s average) and
its 368 continuous-batching requests, replicated back to back over N GPUs and H hours (8 GPUs per
host, two endpoints of 4 GPUs each), then `wattline run --select ...` timed as a child process
(CPU of the whole tree, peak RSS), RUNS times; the median is reported.

    python -m bench.event_time --gpus 8 --hours 24 --runs 3 [--before /tmp/old-checkout] [--threads 1]

``--training``: the same power files as one training host (one job over its 8 GPUs, no requests;
its own data dir, the power files hard-linked). ``--all``: time the whole ``wattline run`` (every
asset) instead of the selection. ``--floor``: also time ``bench/baseline_floor.py`` (one DuckDB scan,
per-GPU per-second means) on the same files each round, and record the bytes on disk of the raw
power and of each derived table after each contender's run.

``--before DIR``: also time the same assets with the code of another checkout (PYTHONPATH=DIR),
e.g. ``git archive 6094b1d | tar -x -C DIR``. The machine may be shared: CPU seconds, not wall.
DuckDB's thread count is left to the pipeline's default unless ``--threads`` sets
WATTLINE_DUCKDB_THREADS. Per-asset wall seconds come from ``wattline run --timings`` (the last
run's); the result is printed and written as JSON to bench/results/event-time/ (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import yaml

from bench.measure import run_measured
from collectors.contract import POWER, REQUESTS
from collectors.parquet_sink import write_dataset

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200-capture-4"
DATE = "2026-12-03"
BEFORE_ASSETS = ["power_1s", "fleet_power_1s", "power_100ms", "fleet_power_100ms", "swing_stats",
                 "phase_timeline", "phase_segments", "request_energy", "energy_per_token"]
AFTER_ASSETS = [*BEFORE_ASSETS, "energy_curve", "phase_intervals"]
"""The selection of code that has energy_curve and phase_intervals as assets (every checkout since
they became assets: phase_segments then needs phase_intervals selected); BEFORE_ASSETS is that of
older checkouts (``--before-selection old``)."""
BIN = Path(sys.executable).parent
RESULTS = Path(__file__).resolve().parent / "results" / "event-time"
_TIMING = re.compile(r"^\s+(\S+)\s+([0-9.]+) s(?:\s+([0-9]+) MB peak RSS)?$", re.M)


def asset_times(stdout: str) -> dict[str, float]:
    """``wattline run --timings``' per-asset wall seconds, by asset."""
    return {name: float(s) for name, s, _ in _TIMING.findall(stdout)}


def asset_peaks(stdout: str) -> dict[str, float]:
    """``wattline run --timings``' per-asset peak RSS of the process (MB), by asset."""
    return {name: float(mb) for name, _, mb in _TIMING.findall(stdout) if mb}


def write_data(data_dir: Path, gpus: int, hours: float) -> int:
    power = pl.read_parquet(str(CAPTURE / "power" / "**" / "*.parquet"), hive_partitioning=False)
    req = pl.read_csv(CAPTURE / "requests.csv")
    t0 = int(power["ts"].dt.epoch("ns").min())
    span = int(power["ts"].dt.epoch("ns").max()) - t0 + 1_000_000_000
    day0 = int(pl.Series([DATE]).str.to_datetime().dt.replace_time_zone("UTC").dt.epoch("ns")[0])
    copies = max(1, int(hours * 3600e9 // span))
    hosts = gpus // 8
    inv = {"fleets": [{"name": "bench", "clusters": [{"name": "c0", "hosts": [
        {"name": f"infer-{h}", "role": "inference", "gpus": [{"index": i, "tdp_w": 700, "model": "H200"} for i in range(8)],
         "endpoints": [{"name": f"ep-{h}-a", "gpus": [0, 1, 2, 3]}, {"name": f"ep-{h}-b", "gpus": [4, 5, 6, 7]}]}
        for h in range(hosts)]}]}]}
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "inventory.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
    rows = 0
    start = min(3600, max(0, int(24 * 3600 - copies * span / 1e9))) * 10**9  # 01:00, earlier when the copies would pass midnight
    base = power.with_columns((pl.col("ts").dt.epoch("ns") - t0 + day0 + start).alias("t"))
    for h in range(hosts):
        for c in range(copies):
            shifted = base.with_columns((pl.col("t") + c * span).alias("t"))
            frames = [shifted.with_columns(pl.lit(g, pl.UInt8).alias("gpu"), pl.lit(f"infer-{h}").alias("host")) for g in range(8)]
            df = pl.concat(frames).with_columns(pl.from_epoch("t", time_unit="ns").dt.replace_time_zone("UTC").alias("ts")).drop("t")
            table = df.to_arrow()
            table = pa.table({f.name: (table[f.name] if f.name in table.column_names else pa.nulls(len(table), f.type)) for f in POWER})
            write_dataset(table.cast(POWER, safe=False), data_dir, "power", prefix=f"h{h}c{c}")
            rows += len(table)
        r = []
        for c in range(copies):
            off = day0 + start - t0 + c * span
            for ep in ("a", "b"):
                r.append(req.select(
                    (pl.lit(f"{h}{ep}{c}-") + pl.col("request_id").cast(pl.Utf8)).alias("request_id"),
                    pl.lit(f"ep-{h}-{ep}").alias("endpoint"),
                    *[(pl.col(f"{k}_ns") + off).alias(f"{k}_ts") for k in ("arrival", "prefill_start", "first_token", "end")],
                    "prompt_tokens", "output_tokens"))
        rq = pl.concat(r)
        ts = pa.timestamp("ns", tz="UTC")
        write_dataset(pa.table({
            "request_id": rq["request_id"].to_arrow(), "endpoint": rq["endpoint"].to_arrow(),
            **{f"{k}_ts": pa.array(rq[f"{k}_ts"].to_numpy()).cast(ts) for k in ("arrival", "prefill_start", "first_token", "end")},
            "prompt_tokens": rq["prompt_tokens"].cast(pl.Int32).to_arrow(), "output_tokens": rq["output_tokens"].cast(pl.Int32).to_arrow(),
            "status": pa.array(["ok"] * rq.height), "max_tokens": pa.nulls(rq.height, pa.int32()),
            "replica": pa.nulls(rq.height, pa.string()),
        }).select(REQUESTS.names).cast(REQUESTS), data_dir, "requests", prefix=f"r{h}")
    return rows


def as_training(src: Path, dst: Path) -> None:
    """``src``'s power files (hard links) under ``dst`` with its one host made a training host of one job."""
    inv = yaml.safe_load((src / "inventory.yaml").read_text())
    for cluster in inv["fleets"][0]["clusters"]:
        for host in cluster["hosts"]:
            host["role"] = "training"
            host["jobs"] = [{"name": f"pretrain-{host['name']}", "gpus": [g["index"] for g in host["gpus"]]}]
            host.pop("endpoints", None)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "power", dst / "power", copy_function=os.link)
    (dst / "inventory.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))


def du_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (as ``du -sb`` counts file sizes), 0 when absent."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def disk_bytes(data_dir: Path) -> dict:
    """Raw power bytes, derived bytes, and bytes per derived table (derived/<table>/...)."""
    derived = data_dir / "derived"
    tables = {d.name: du_bytes(d) for d in sorted(derived.iterdir()) if d.is_dir()} if derived.exists() else {}
    return {"power": du_bytes(data_dir / "power"), "derived": du_bytes(derived), "derived_by_table": tables}


def tile_arguments(description: str, hours: float) -> argparse.ArgumentParser:
    """The arguments every benchmark of the capture tile takes: its size (GPUs, hours), the runs,
    where the tile lives, the checkout to compare with (``--before``) and the result file."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=hours)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/wattline-bench-event-time"))
    ap.add_argument("--before", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="JSON result (default: under bench/results/)")
    return ap


def main() -> None:
    ap = tile_arguments(__doc__.splitlines()[0], hours=3.0)
    ap.add_argument("--threads", type=int, default=None, help="WATTLINE_DUCKDB_THREADS (default: unset)")
    ap.add_argument("--only", choices=("before", "after"), default=None, help="time only one side")
    ap.add_argument("--training", action="store_true", help="the same power files as one training host, no requests")
    ap.add_argument("--all", action="store_true", help="time the whole wattline run (every asset), not the selection")
    ap.add_argument("--before-selection", choices=("old", "same"), default="old",
                    help="the --before checkout's selection: BEFORE_ASSETS (old) or the same as after's")
    ap.add_argument("--floor", action="store_true", help="also time bench/baseline_floor.py on the same files; record bytes on disk")
    args = ap.parse_args()
    data_dir = args.work / f"gpus-{args.gpus}-h{args.hours:g}"
    if not (data_dir / "power").exists():
        print(f"wrote {write_data(data_dir, args.gpus, args.hours)} power rows", flush=True)
    if args.training:
        src, data_dir = data_dir, args.work / f"gpus-{args.gpus}-h{args.hours:g}-training"
        if not (data_dir / "power").exists():
            as_training(src, data_dir)
    gpu_days = args.gpus * args.hours / 24
    out = {"gpus": args.gpus, "hours": args.hours, "gpu_days": gpu_days, "threads": args.threads,
           "variant": "training" if args.training else "inference+requests", "assets": "all" if args.all else "selection",
           "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_start": os.getloadavg()}
    threads = {"WATTLINE_DUCKDB_THREADS": str(args.threads)} if args.threads else {}
    if not args.threads:
        os.environ.pop("WATTLINE_DUCKDB_THREADS", None)
    contenders = [] if args.only == "before" else [("after", AFTER_ASSETS, dict(threads))]
    if args.before and args.only != "after":
        before_assets = BEFORE_ASSETS if args.before_selection == "old" else AFTER_ASSETS
        out["before_assets"] = before_assets
        contenders.insert(0, ("before", before_assets, {"PYTHONPATH": str(args.before), **threads}))
    if args.floor:
        contenders.append(("floor", None, {}))
    suffix = ("-training" if args.training else "") + ("-all" if args.all else "")
    path = args.out or RESULTS / f"gpus-{args.gpus}-h{args.hours:g}{suffix}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list] = {name: [] for name, _, _ in contenders}
    for _ in range(args.runs):  # before and after alternate, so a change in the machine's load hits both
        for name, assets, env in contenders:
            if assets is None:  # the floor
                argv = [sys.executable, str(Path(__file__).resolve().parent / "baseline_floor.py"), str(data_dir), DATE]
            else:
                if args.floor:  # the bytes recorded are this contender's tables only
                    shutil.rmtree(data_dir / "derived", ignore_errors=True)
                argv = [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir), "--timings",
                        *([] if args.all else ["--select", ",".join(assets)])]
            m = run_measured(name, argv, env=env)
            print(name, f"rc {m.returncode}, cpu {m.cpu_s:.1f} s, wall {m.wall_s:.1f} s, rss {m.peak_rss_mb:.0f} MB", flush=True)
            print(m.stdout, flush=True)
            if m.returncode != 0:  # e.g. out of memory: recorded, not a median
                out.setdefault(f"{name}_failed", []).append({"cpu_s": m.cpu_s, "wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb,
                                                             "asset_wall_s": asset_times(m.stdout), "tail": m.stdout[-2000:]})
            else:
                runs[name].append(m)
                done = runs[name]
                out[name] = {"cpu_s_median": statistics.median(r.cpu_s for r in done), "cpu_s": [r.cpu_s for r in done],
                             "cpu_s_per_gpu_day": statistics.median(r.cpu_s for r in done) / gpu_days,
                             "peak_rss_mb": max(r.peak_rss_mb for r in done), "wall_s": [r.wall_s for r in done],
                             "asset_wall_s": asset_times(done[-1].stdout), "asset_peak_rss_mb": asset_peaks(done[-1].stdout)}
                if args.floor and assets is not None:
                    out[name]["bytes"] = disk_bytes(data_dir)
            out["load_avg_end"] = os.getloadavg()
            path.write_text(json.dumps(out, indent=1, default=str) + "\n")  # kept after every run
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
