"""CPU seconds, wall seconds and peak RSS of each step of one whole ``wattline run``, in process.

    python -m bench.step_cpu DATA_DIR [--date D] [--select a,b] [--json OUT]

``wattline run --timings`` gives each step's wall time and the process's peak RSS while it ran;
on a shared machine wall time follows the neighbours' load. This runs the same day (every
asset, one worker, so each step runs in this process) with each table step's compute wrapped
to record the process CPU time it took (every DuckDB thread included) beside its wall time and
peak RSS (``pipeline.process_memory``, as ``--timings`` reports it). The steps of one run: what
a step leaves for a later one of the same run (the series engine's curves) counts as in a real run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pipeline import process_memory, tables
from pipeline.runner import run_day


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.step_cpu")
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--date", default="2026-12-03")
    ap.add_argument("--select", default=None, help="comma-separated assets (default: every asset)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    steps: dict[str, dict] = {}
    compute = tables.Table.compute

    def timed(self, context, warehouse, config, rollup):
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return compute(self, context, warehouse, config, rollup)
        finally:
            name = ("fleet__" if rollup else "") + self.name
            s = steps.setdefault(name, {"cpu_s": 0.0, "wall_s": 0.0, "peak_rss_mb": 0.0})
            s["cpu_s"] += time.process_time() - cpu
            s["wall_s"] += time.perf_counter() - wall
            s["peak_rss_mb"] = max(s["peak_rss_mb"], process_memory.peak_mb() or 0.0)

    tables.Table.compute = timed  # type: ignore[method-assign]
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = run_day(args.data_dir, args.date, selection=args.select.split(",") if args.select else None, workers=1)
    total = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "success": outcome.success}
    for name, s in sorted(steps.items(), key=lambda kv: -kv[1]["cpu_s"]):
        print(f"  {name:<32} cpu {s['cpu_s']:7.2f} s  wall {s['wall_s']:7.2f} s  {s['peak_rss_mb']:6.0f} MB peak RSS")
    print(f"  {'(whole run, this process)':<32} cpu {total['cpu_s']:7.2f} s  wall {total['wall_s']:7.2f} s  success {outcome.success}")
    if args.json:
        args.json.write_text(json.dumps({"steps": steps, "total": total}, indent=1) + "\n")


if __name__ == "__main__":
    main()
