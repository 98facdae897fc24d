"""Per-asset CPU cost and DuckDB operator profile, for finding what to speed up.

    python -m bench.asset_profile DATA_DIR [--date D] [--assets a,b] [--cluster C] [--profile DIR] [--top 8]

Re-materializes each named asset's parts of the day in this process, the way the asset does (its
``sql/<table>.sql`` through ``warehouse.write_partition``, a Python table through its writer),
with the same compute connection settings, variables of its default Dagster config and thread
setting, then runs the asset's checks. Prints wall and CPU seconds (process CPU: every DuckDB
thread) of the write and of the checks, per part.

It writes where ``wattline run`` writes: a cluster-day table's part of each cluster-day of the day
(``derived/<table>/date=D/cluster=C/``; ``--cluster``: that one only), a fleet-day table's
``date=D/`` part, never a cluster-day table's rows into the fleet-day's ``date=D/`` (which would
sit beside the cluster parts and count every row twice). The parts it writes hold the rows the run
wrote where the run had the same settings and the default config; to leave a day untouched, run it
on a copy made with ``cp -r`` (not ``cp -al``: the catalog, warehouse.duckdb, is written in place).

Usage: build the day once (``wattline run --date D --data-dir DIR``: upstream tables must be
there), then ``python -m bench.asset_profile DIR --date D --assets swing_stats,phase_timeline``.
With ``--profile``, DuckDB's JSON profile of each statement is written there and its most
expensive operators (summed thread time, as EXPLAIN ANALYZE shows them) are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

DATE = "2026-11-30"
def _table(name: str):
    """The Table declaration of ``name`` (pipeline/tables.py), from the modules of pipeline.assets."""
    import importlib
    import pkgutil

    import pipeline.assets
    from pipeline.tables import Table

    for info in pkgutil.iter_modules(pipeline.assets.__path__):
        for value in vars(importlib.import_module(f"pipeline.assets.{info.name}")).values():
            if isinstance(value, Table) and value.name == name:
                return value
    raise SystemExit(f"no table {name!r}")


def _operators(node: dict, out: list, depth: int = 0) -> None:
    """(seconds, rows out, operator, detail) of each node; DuckDB 2.x names (``timing``, ``name``)
    and 1.x names (``operator_timing``, ``operator_name``) both read."""
    name = node.get("name") or node.get("operator_name") or node.get("operator_type") or "?"
    extra = node.get("extra_info") or {}
    label = extra.get("CTE Name") or extra.get("Aggregates") or extra.get("Groups") or extra.get("Join Type") \
        or extra.get("Function") or extra.get("Projections") or extra.get("Table") or ""
    if isinstance(label, list):
        label = ", ".join(map(str, label))
    timing = node.get("timing", node.get("operator_timing", 0.0))
    rows = node.get("intermediate_rows", node.get("operator_cardinality", 0))
    out.append((float(timing or 0.0), int(rows or 0), name.strip(), " ".join(str(label).split())[:80], depth))
    for child in node.get("children", []):
        _operators(child, out, depth + 1)


def _run(con, sql: str, profile: Path | None, tag: str, top: int) -> None:
    if profile is None:
        con.execute(sql)
        return
    path = profile / f"{tag}.json"
    con.execute("PRAGMA enable_profiling = 'json'")
    con.execute(f"PRAGMA profiling_output = '{path}'")
    con.execute(sql)
    con.execute("PRAGMA disable_profiling")
    if not path.exists():  # a statement that runs no query (CREATE MACRO) leaves no profile
        return
    tree = json.loads(path.read_text())
    ops: list = []
    for child in tree.get("operator", tree.get("children", [])):
        _operators(child, ops)
    total = sum(o[0] for o in ops) or 1.0
    q, system = tree.get("query", {}), tree.get("system", {})
    print(f"    {tag}: operators {total:.2f} s, query cpu {q.get('cpu_time', 0):.2f} s, latency {q.get('total_time', tree.get('latency', 0)):.2f} s, "
          f"peak buffer {system.get('peak_buffer_memory', 0) / 2**20:.0f} MiB, spilled {system.get('total_bytes_spilled', 0) / 2**20:.0f} MiB")
    for t, rows, name, label, _ in sorted(ops, key=lambda o: -o[0])[:top]:
        print(f"      {t:7.2f} s {100 * t / total:5.1f}%  {rows:>12,}  {name:<22} {label}")


def scopes(data_dir: Path, table: str, date: str, cluster: str | None) -> list:
    """The parts ``wattline run`` writes of ``table`` on ``date``: each cluster-day (of the
    inventory and, for hosts it does not list, the unassigned one; ``cluster``: that one only), or
    the fleet-day of a fleet-day table."""
    from pipeline.datadir import day_clusters
    from pipeline.scope import Scope

    if _table(table).partitions == "fleet-day":
        if cluster:
            raise SystemExit(f"{table} is a fleet-day table: it has no cluster-day part")
        return [Scope(date=date, fleet=True)]
    return [Scope(date=date, cluster=c) for c in ([cluster] if cluster else day_clusters(data_dir, date))]


def profile_asset(resource, table: str, scope, profile: Path | None, top: int) -> dict:
    """Write ``table``'s part for ``scope`` (a cluster-day or the fleet-day: :func:`scopes`) as its
    asset does, then run its checks; the seconds each took."""
    from pipeline.tables import TableRun, one_thread, statements

    spec = _table(table)
    if spec.series:
        raise SystemExit(f"{table} is a series table: time the engine's pass with bench/series_step.py")
    tag = f"{table}.{scope.cluster}" if scope.cluster else table
    with resource.connection(scope) as con:
        w0, c0 = time.perf_counter(), time.process_time()
        variables = dict(spec.variables(spec.config(), resource) if spec.variables and spec.config is not None else {})
        if spec.grid_step:  # as Table.compute: a table whose SQL reads the grid step holds it as a variable
            variables["grid_step_ms"] = resource.grid_step_ms
        for name, value in variables.items():
            con.execute(f"SET VARIABLE {name} = ?", [value])
        kernel_cpu = 0.0
        w1, c1 = w0, c0
        if spec.rows is None:
            prepare, query = statements(spec.sql_name())
            for i, statement in enumerate(prepare):
                _run(con, statement, profile, f"{tag}.{i}", top)
            if profile is not None:  # the same COPY as the write, profiled; the write below is then timed alone
                _run(con, f"COPY ({query}) TO '{profile / (tag + '.parquet')}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 500000)",
                     profile, f"{tag}.query", top)
            w1, c1 = time.perf_counter(), time.process_time()
            with one_thread(con) if spec.one_thread else contextlib.nullcontext():
                rows = resource.write_and_publish(con, table, scope, query)
        else:  # a Python table: its function and the write of its rows, timed together
            run = TableRun(scope=scope, rollup=False, grid_step_ms=resource.grid_step_ms)
            rows = spec._write_rows(con, run, lambda stream: resource.write_rows_and_publish(con, table, scope, stream))
            kernel_cpu = time.process_time() - c0
        w2, c2 = time.perf_counter(), time.process_time()
        quarantine = {"rejected_files": {}, "converted_files": {}} if spec.inputs is not None else {}  # cost, not findings
        found = run.found if spec.rows is not None else {}
        for check in spec.checks():
            check.run(con, **quarantine, **found)
        w3, c3 = time.perf_counter(), time.process_time()
    write_wall, write_cpu = (w2 - w0, c2 - c0) if profile is None else (w2 - w1, c2 - c1)
    return {"asset": table, "part": scope.label, "rows": rows, "write_wall_s": write_wall, "write_cpu_s": write_cpu,
            "checks_wall_s": w3 - w2, "checks_cpu_s": c3 - c2, "kernel_cpu_s": kernel_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.asset_profile")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--date", default=DATE)
    parser.add_argument("--assets", default="swing_stats,phase_timeline,phase_segments,request_energy,energy_per_token")  # series tables: bench/series_step.py
    parser.add_argument("--profile", type=Path, help="write DuckDB JSON profiles here and print the top operators")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--cluster", default=None, help="only this cluster-day's part of a cluster-day table (default: every cluster-day of the day)")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()
    from collectors.settings import load
    from pipeline.resources import WarehouseResource

    resource = WarehouseResource.from_settings(load(), args.data_dir.resolve())  # WATTLINE_GRID_STEP_MS and the DuckDB bound apply
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    results = []
    for table in args.assets.split(","):
        for scope in scopes(resource.path, table, args.date, args.cluster):
            r = profile_asset(resource, table, scope, args.profile, args.top)
            results.append(r)
            print(f"  {table:<20} {r['part']:<20} rows {r['rows']:>11,}  write {r['write_cpu_s']:7.2f} s CPU {r['write_wall_s']:7.2f} s wall"
                  f"   checks {r['checks_cpu_s']:6.2f} s CPU {r['checks_wall_s']:6.2f} s wall   (kernel {r['kernel_cpu_s']:.2f} s CPU)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
