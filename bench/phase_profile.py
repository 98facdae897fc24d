"""Python profile (cProfile) of the Python-table steps: the phase and swing tables, with the run's
curve cache in place as in a real run.

    python -m bench.phase_profile DATA_DIR [--date D] [--assets a,b] [--top 25] [--no-cache] [--repeat 1] [--cluster C] [--write]

Upstream tables must already be materialized (``wattline run`` once). The curve cache is built
first from the day's raw samples (what the engine pass leaves a run) and handed to the steps as
the run's (``--no-cache``: none, the steps read the raw files). Each table's rows are computed in
this thread, a stream read to its end here rather than by the part's COPY (a COPY reads it from
DuckDB's threads, which cProfile does not see), and not written. Prints the process CPU seconds
of each step (every thread) and its functions by internal CPU time (the process's, so a call that
waits on DuckDB's threads is charged their work).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow as pa

warnings.filterwarnings("ignore")


def build_cache(resource, date: str):
    """The day's curve cache, as the engine pass leaves it: every host's GPUs (engine.host_samples)."""
    from pipeline.series import cache as curve_cache
    from pipeline.series.engine import host_samples

    folder = Path(tempfile.mkdtemp(prefix="phase-profile-"))
    cache = curve_cache.CurveCache(folder)
    with resource.connection(date) as con:
        hosts = [h for (h,) in con.execute("SELECT DISTINCT host FROM power_100ms WHERE date = getvariable('partition_date') ORDER BY 1").fetchall()]
        for host in hosts:
            for s in host_samples(con, host, None):
                cache.put(s)
    cache.seal()
    return curve_cache.of_run(None) or curve_cache.CurveCache(folder, cache.hosts)


def use_cache(cache) -> None:
    """Every reader of the run's curves gets ``cache`` (series_run.run_curves, as imported by each module)."""
    import pipeline.assets.inference_phases as ip
    import pipeline.assets.swing_stats as ss
    import pipeline.phases.curve as cv
    import pipeline.series_run as sr

    for module in (ip, ss, cv, sr):
        module.run_curves = lambda: cache  # type: ignore[attr-defined]


def rows_of(resource, table: str, date: str, rollup: bool = False, cluster: str | None = None) -> int:
    """The step's rows computed in this thread (a stream read to its end), not written."""
    from bench.asset_profile import _table
    from pipeline.scope import Scope
    from pipeline.tables import TableRun

    spec = _table(table)
    scope = Scope(date=date, cluster=cluster) if cluster else Scope(date=date)
    with resource.connection(scope) as con:
        if spec.grid_step:
            con.execute("SET VARIABLE grid_step_ms = ?", [resource.grid_step_ms])
        got = spec.rows(con, TableRun(scope=scope, rollup=rollup, grid_step_ms=resource.grid_step_ms))
        if isinstance(got, pa.RecordBatchReader):
            return sum(b.num_rows for b in got)
        return got.num_rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.phase_profile")
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--date", default="2026-12-03")
    ap.add_argument("--assets", default="phase_intervals,phase_segments,phase_timeline,swing_stats,swing_projection")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cluster", default=None, help="the cluster-day to run (the layout `wattline run` writes when the inventory has clusters)")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="time each step this many times (CPU s of each), profile the last")
    ap.add_argument("--quiet", action="store_true", help="CPU seconds only, no profile")
    ap.add_argument("--write", action="store_true",
                    help="also time the step as the run does: rows, write and checks (bench/asset_profile.py: it rewrites the day's parts)")
    args = ap.parse_args()
    from collectors.settings import load
    from pipeline.resources import WarehouseResource

    resource = WarehouseResource.from_settings(load(), args.data_dir.resolve())
    if not args.no_cache:
        c0 = time.process_time()
        use_cache(build_cache(resource, args.date))
        print(f"curve cache built: {time.process_time() - c0:.2f} s CPU", flush=True)
    for table in args.assets.split(","):
        cpus = []
        for i in range(args.repeat):
            prof = cProfile.Profile(time.process_time) if (i == args.repeat - 1 and not args.quiet) else None
            c0 = time.process_time()
            if prof:
                prof.enable()
            n = rows_of(resource, table, args.date, cluster=args.cluster)
            if prof:
                prof.disable()
            cpus.append(time.process_time() - c0)
        print(f"== {table}: {n} rows, CPU s {' '.join(f'{c:.2f}' for c in cpus)}", flush=True)
        if prof:
            stats = pstats.Stats(prof).sort_stats("tottime")
            stats.print_stats(args.top)
        if args.write:
            from bench.asset_profile import profile_asset, scopes

            for scope in scopes(resource.path, table, args.date, args.cluster):  # the parts `wattline run` writes
                r = profile_asset(resource, table, scope, None, 0)
                print(f"   written {r['part']}: write {r['write_cpu_s']:.2f} s CPU, checks {r['checks_cpu_s']:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
