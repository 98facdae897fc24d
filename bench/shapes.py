"""The simulator's two shapes side by side: CPU seconds per GPU-day to simulate and to run the pipeline.

    python bench/shapes.py [--gpus 8] [--work bench/work/shapes]

For each ``--shape`` (``simple``: one 10 Hz series per GPU; ``collector``: the collector's ~50 Hz
driver-buffer rows and 10 Hz field rows, one file per host and hour), simulates ``--gpus`` GPUs
(``bench/fleets.py``) for one day, then runs ``wattline run`` with every asset but the report, each as
a child process measured by ``bench/measure.py`` (CPU = user + sys of the process tree). Writes
``bench/results/shapes.json``; the table is in docs/benchmarks.md ("Simulator shapes").
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


def one_shape(shape: str, n_gpus: int, work: Path) -> dict:
    data_dir = work / f"gpus-{n_gpus}-{shape}"
    shutil.rmtree(data_dir, ignore_errors=True)
    fleet = write_fleet(n_gpus, work / f"fleet-{n_gpus}.yaml")
    sim = run_measured(f"simulate-{shape}", [str(BIN / "wattline"), "simulate", "--fleet", str(fleet), "--start", DATE,
                                             "--shape", shape, "--data-dir", str(data_dir)])
    assert sim.returncode == 0, "simulation failed"
    rows = power_rows(data_dir)
    size = sum(p.stat().st_size for p in (data_dir / "power").rglob("*.parquet"))
    run = run_measured(f"pipeline-{shape}", [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir),
                                             "--select", ",".join(pipeline_assets())])
    assert run.returncode == 0, "pipeline failed"
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"shape": shape, "gpu_days": n_gpus, "power_rows": rows, "power_bytes": size,
            "simulate": vars(sim) | {"stdout": None}, "pipeline": vars(run) | {"stdout": None},
            "simulate_cpu_s_per_gpu_day": sim.cpu_s / n_gpus, "pipeline_cpu_s_per_gpu_day": run.cpu_s / n_gpus}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8, help="GPU-days per shape (a multiple of 8)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "shapes")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = [one_shape(s, args.gpus, args.work.resolve()) for s in ("simple", "collector")]
    print(f"{'shape':<10} {'rows':>12} {'MB':>7} {'sim CPU s/GPU-day':>18} {'run CPU s/GPU-day':>18} {'run wall s':>10} {'run RSS MB':>10}")
    for r in results:
        print(f"{r['shape']:<10} {r['power_rows']:>12,} {r['power_bytes'] / 1e6:>7.0f} {r['simulate_cpu_s_per_gpu_day']:>18.1f} "
              f"{r['pipeline_cpu_s_per_gpu_day']:>18.1f} {r['pipeline']['wall_s']:>10.1f} {r['pipeline']['peak_rss_mb']:>10.0f}")
    print(f"written {save('shapes', {'results': results})}")


if __name__ == "__main__":
    main()
