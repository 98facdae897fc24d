"""The simulator's two shapes side by side: CPU seconds per GPU-day to simulate and to run the pipeline.

    python bench/shapes.py [--gpus 8] [--hours 1,3] [--work bench/work/shapes]

For each ``--shape`` (``simple``: one 10 Hz series per GPU; ``collector``: the collector's ~50 Hz
driver-buffer rows and 10 Hz field rows, one file per host and hour) and each length in ``--hours``,
simulates ``--gpus`` GPUs (``bench/fleets.py``) for the first hours of a day, then runs ``wattline run``
with every asset but the report, each as a child process measured by ``bench/measure.py`` (CPU = user +
sys of the process tree). With two lengths it prints the marginal CPU seconds per GPU-hour between them
(fixed costs such as Dagster's start cancel out) × 24 = per GPU-day. Writes ``bench/results/shapes.json``
after every run; the table is in docs/benchmarks.md ("Simulator shapes").
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.fleets import write_fleet  # noqa: E402
from bench.measure import run_measured, save  # noqa: E402
from bench.throughput import DATE, pipeline_assets, power_rows  # noqa: E402

BIN = Path(sys.executable).parent


def one_shape(shape: str, n_gpus: int, hours: float, work: Path, pipeline: bool = True) -> dict:
    data_dir = work / f"gpus-{n_gpus}-{shape}-{hours}h"
    shutil.rmtree(data_dir, ignore_errors=True)
    fleet = write_fleet(n_gpus, work / f"fleet-{n_gpus}.yaml")
    sim = run_measured(f"simulate-{shape}", [str(BIN / "wattline"), "simulate", "--fleet", str(fleet), "--start", DATE,
                                             "--shape", shape, "--hours", str(hours), "--data-dir", str(data_dir)])
    assert sim.returncode == 0, "simulation failed"
    rows = power_rows(data_dir)
    size = sum(p.stat().st_size for p in (data_dir / "power").rglob("*.parquet"))
    if not pipeline:
        shutil.rmtree(data_dir, ignore_errors=True)
        return {"shape": shape, "gpus": n_gpus, "hours": hours, "power_rows": rows, "power_bytes": size,
                "simulate": vars(sim) | {"stdout": None}, "pipeline": None}
    run = run_measured(f"pipeline-{shape}", [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir),
                                             "--select", ",".join(pipeline_assets())])
    assert run.returncode == 0, "pipeline failed"
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"shape": shape, "gpus": n_gpus, "hours": hours, "power_rows": rows, "power_bytes": size,
            "simulate": vars(sim) | {"stdout": None}, "pipeline": vars(run) | {"stdout": None}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8, help="GPUs (a multiple of 8)")
    ap.add_argument("--hours", default="1,3", help="simulated hours of the day, comma-separated")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "shapes")
    ap.add_argument("--simulate-only", action="store_true", help="time only `wattline simulate` (no pipeline run)")
    ap.add_argument("--shapes", default="simple,collector", help="which shapes, comma-separated")
    ap.add_argument("--name", default="shapes", help="results file name under bench/results/")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    hours = [float(h) for h in args.hours.split(",")]
    results = []
    shapes = args.shapes.split(",")
    pipeline = not args.simulate_only
    for shape in shapes:
        for h in hours:
            r = one_shape(shape, args.gpus, h, args.work.resolve(), pipeline)
            results.append(r)
            run = (f"  run CPU {r['pipeline']['cpu_s']:>6.1f} s wall {r['pipeline']['wall_s']:>6.1f} s "
                   f"RSS {r['pipeline']['peak_rss_mb']:>5.0f} MB") if pipeline else ""
            print(f"{shape:<10} {h:>4} h {r['power_rows']:>12,} rows {r['power_bytes'] / 1e6:>7.1f} MB  simulate CPU "
                  f"{r['simulate']['cpu_s']:>6.1f} s{run}", flush=True)
            save(args.name, {"results": results})
    if len(hours) >= 2:
        for shape in shapes:
            a, b = (next(r for r in results if r["shape"] == shape and r["hours"] == h) for h in (hours[0], hours[-1]))
            gpu_h = args.gpus * (b["hours"] - a["hours"])
            run = (f", wattline run {24 * (b['pipeline']['cpu_s'] - a['pipeline']['cpu_s']) / gpu_h:.1f}" if pipeline else "")
            print(f"{shape:<10} marginal CPU s per GPU-day: simulate {24 * (b['simulate']['cpu_s'] - a['simulate']['cpu_s']) / gpu_h:.1f}"
                  f"{run}; rows per GPU-day {24 * (b['power_rows'] - a['power_rows']) / gpu_h / 1e6:.2f} M")
    print(f"written {save(args.name, {'results': results})}")


if __name__ == "__main__":
    main()
