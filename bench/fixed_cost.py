"""A run's fixed cost: one whole in-process ``run_day`` of the tiny simulated day, CPU and wall.

    python -m bench.fixed_cost OUT_DIR [--profile FILE.prof] [--hours 0.1] [--keep]

Simulates ``fleet="tiny"`` for the first ``--hours`` of 2026-11-30 (seed 0) into ``OUT_DIR/data``
(once; later calls copy that), then runs the whole day in this process on a fresh copy and prints
one JSON line: CPU seconds of the process and its children (user + sys), wall seconds, peak RSS.
The test suite builds ~110 days of this size, so this cost sets its length. ``--profile`` writes
cProfile's stats of the run (not of the simulation), timed in
CPU seconds of the process.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import os
import resource
import shutil
import time
from pathlib import Path

DATE = dt.date(2026, 11, 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--hours", type=float, default=0.1)
    parser.add_argument("--keep", action="store_true", help="keep the run's data dir (OUT/run) for bench.compare_derived")
    args = parser.parse_args()
    from collectors.simulate import simulate

    source = args.out / f"sim-{args.hours}"
    if not source.exists():
        tmp = args.out / f"sim-{args.hours}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        simulate(tmp, start=DATE, fleet="tiny", hours=args.hours, seed=0)
        tmp.rename(source)
    data = args.out / "run"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(source, data)
    # As the test suite runs a day (tests/conftest.py): no PNGs, two DuckDB threads, a reports
    # folder kept between runs (the page's Vega bundle cached there after the first).
    os.environ["WATTLINE_REPORTS_DIR"] = str(args.out / "reports")
    os.environ.setdefault("WATTLINE_REPORT_PNG", "off")
    os.environ.setdefault("WATTLINE_DUCKDB_THREADS", "2")

    from pipeline.runner import run_day

    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not wall
    before, started = os.times(), time.perf_counter()
    if profiler:
        profiler.enable()
    outcome = run_day(data, DATE.isoformat())
    if profiler:
        profiler.disable()
    wall, after = time.perf_counter() - started, os.times()
    if profiler:
        profiler.dump_stats(args.profile)
    cpu = sum(after[i] - before[i] for i in range(4))
    print(json.dumps({"ok": outcome.ok, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "materialized": len(outcome.materialized), "error": outcome.error}))
    if not args.keep:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
