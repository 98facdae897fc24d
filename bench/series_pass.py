"""CPU of the series pass alone (``pipeline.series.engine.write_parts``: power_1s, power_100ms,
energy_curve and the run's curve cache, one read of the samples), without Dagster's start or the
catalog, against the floor (bench/baseline_floor.py) on the same files.

Each contender is a child process (``--before DIR``: another checkout's code, e.g. a detached
worktree of main; then this one's) that opens the warehouse, then times only the pass: CPU
seconds (user + sys of the process, DuckDB's threads included) and its peak RSS. The contenders
and the floor alternate RUNS times; medians are reported. Data: bench/event_time.py's tiling of
h200-capture-4 (written to ``--work`` when missing).

    python -m bench.series_pass --gpus 8 --hours 6 --runs 3 --before /work/wt/tmp-main
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.event_time import DATE, tile_arguments, write_data
from bench.measure import run_measured

HERE = Path(__file__).resolve().parent.parent


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_pass(data_dir: Path) -> dict:
    """Run the pass once in this process (the code on ``sys.path``) with glibc set as a run's
    steps set it (process_memory.return_freed_memory); CPU, wall, peak RSS."""
    from pipeline import process_memory
    from pipeline.resources import WarehouseResource
    from pipeline.scope import Scope
    from pipeline.series import SERIES_TABLES
    from pipeline.series import cache as curve_cache
    from pipeline.series.engine import write_parts

    process_memory.return_freed_memory()
    res = WarehouseResource(data_dir=str(data_dir))
    tmp = data_dir / ".duckdb_tmp"
    tmp.mkdir(exist_ok=True)
    out = Path(tempfile.mkdtemp(dir=tmp))
    with res.connection(Scope(date=DATE, cluster="c0")) as con:
        paths = {t.name: out / f"{t.name}.parquet" for t in SERIES_TABLES}
        cache = curve_cache.begin("bench", tmp)
        cpu, wall = _cpu_s(), time.perf_counter()
        with tempfile.TemporaryDirectory(dir=tmp) as folder:
            rows = write_parts(con, SERIES_TABLES, paths, DATE, Path(folder), cache)
        cpu, wall = _cpu_s() - cpu, time.perf_counter() - wall
        curve_cache.drop("bench")
    for p in paths.values():
        p.unlink()
    out.rmdir()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"cpu_s": cpu, "wall_s": wall, "peak_rss_mb": peak_mb, "rows": rows}


def main() -> None:
    ap = tile_arguments(__doc__.splitlines()[0], hours=2.0)
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_pass(args.child)))
        return
    data_dir = args.work / f"gpus-{args.gpus}-h{args.hours:g}"
    if not (data_dir / "power").exists():
        print(f"wrote {write_data(data_dir, args.gpus, args.hours)} power rows", flush=True)
    os.environ.pop("WATTLINE_DUCKDB_THREADS", None)
    contenders = [("after", str(HERE))]
    if args.before:
        contenders.insert(0, ("before", str(args.before)))
    out: dict = {"gpus": args.gpus, "hours": args.hours, "load_avg_start": os.getloadavg()}
    runs: dict[str, list[dict]] = {name: [] for name, _ in contenders}
    floors: list[float] = []
    for _ in range(args.runs):
        for name, path in contenders:
            child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(data_dir)],
                                   env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
            if child.returncode != 0:
                print(name, "failed:", child.stderr[-3000:], flush=True)
                continue
            r = json.loads(child.stdout.strip().splitlines()[-1])
            runs[name].append(r)
            print(name, f"cpu {r['cpu_s']:.2f} s, wall {r['wall_s']:.2f} s, peak rss {r['peak_rss_mb']:.0f} MB", flush=True)
        m = run_measured("floor", [sys.executable, str(HERE / "bench" / "baseline_floor.py"), str(data_dir), DATE])
        floors.append(m.cpu_s)
        print(f"floor cpu {m.cpu_s:.2f} s", flush=True)
    out["floor_cpu_s"] = floors
    out["floor_cpu_s_median"] = statistics.median(floors)
    for name, done in runs.items():
        if done:
            med = statistics.median(r["cpu_s"] for r in done)
            out[name] = {"cpu_s_median": med, "cpu_s": [r["cpu_s"] for r in done], "x_floor": med / out["floor_cpu_s_median"],
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in done), "rows": done[-1]["rows"]}
    out["load_avg_end"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
