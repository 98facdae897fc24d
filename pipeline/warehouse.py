"""The DuckDB side of the pipeline: compute connections, partition writes and the published catalog.

Design (see README, "Architecture"): assets compute with an in-memory DuckDB that reads the
raw Parquet datasets and writes each derived table's partition as one Parquet file under
``<data-dir>/derived/<table>/date=D/``, replaced atomically (the idempotent
"delete the partition, insert it again"). ``warehouse.duckdb`` is then only a catalog of views
over those files plus the inventory tables; it is rebuilt into a temporary file and renamed
into place, so readers (``wattline sql``, the DuckDB CLI, the reports) open it read-only and
never meet a writer's lock, and no two processes ever write the same DuckDB file.

Paths in SQL: the data dir's own part is glob-escaped (pipeline/sqltext.py), so a data dir
named ``d*`` or ``d[1]`` reads only its own files. The catalog records the data dir it was built
for (table ``catalog_info``); after the folder is moved or copied, readers build the same views
in memory instead (pipeline/readonly.py) and the next writer rebuilds the file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collectors import assignments
from collectors.atomic import TMP_PREFIX, exclusive_lock, fsync_dir
from collectors.contract import ADDED_COLUMNS, ASSIGNMENTS_DIR, DATASETS, JOB_EVENTS
from collectors.inventory import INVENTORY_FILE, Inventory
from collectors.names import check_path_name
from collectors.settings import DEFAULT_JOB_EVENTS_LOOKBACK_DAYS
from pipeline import columns, file_quarantine, process_memory, remote, sqlfiles
from pipeline.constants import DERIVED_DIR, PART_PAGE_ROWS, PART_ROW_GROUP_ROWS, derived_path, warehouse_path
from pipeline.datadir import cluster_members, dataset_paths, linked_paths, load_inventory_if_any, raw_files, stored_assignments
from pipeline.entities import entity_rows
from pipeline.row_groups import RowGroups, write_group
from pipeline.scope import (
    ALWAYS_DEFINED,
    PER_GPU_COLUMNS,
    PER_GPU_TABLES,
    ROLE_ROW_TABLES,
    UNASSIGNED,
    Scope,
    empty_relation_sql,
    read_back_sql,
    store_rows_sql,
)
from pipeline.sqltext import literal, path_literal, pattern_literal

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class WarehouseError(RuntimeError):
    """The data dir cannot serve the request (missing, empty, or no such table)."""


CATALOG_INFO = "catalog_info"
"""The catalog's one-row table naming the data dir it was built for (``data_dir``, ``built_at``)."""


def _check_ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"not a table name: {name!r}")
    return name


def default_memory_mb() -> int:
    """A quarter of physical RAM, at most 2 GiB: the memory all of a day's DuckDBs share (the
    runner divides it among its worker processes). The process holds ~0.5 GB beside DuckDB (Python,
    Dagster, a kernel's arrays), and DuckDB fills its bound on a 64-GPU cluster-day: at 2.5 GiB
    phase_segments and fleet_power_100ms peaked at 3080 and 2952 MiB RSS, at 2 GiB (with freed
    arrays returned, process_memory) the run's peak was 2793 MiB (docs/benchmarks.md)."""
    cap_mb, share = 2048, 0.25
    try:
        ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        ram_mb = 4 * cap_mb
    return max(256, min(cap_mb, int(ram_mb * share)))


def duckdb_config(memory: str | None = None, threads: int | None = None) -> dict:
    """Settings for compute connections: bounded memory that spills, all cores unless told.

    ``memory`` / ``threads``: the values the caller's entry point resolved (the resource's fields,
    from $WATTLINE_DUCKDB_MEMORY / $WATTLINE_DUCKDB_THREADS); None: memory_limit is
    :func:`default_memory_mb` (a quarter of physical RAM capped at 2 GiB), threads DuckDB's own.
    DuckDB's own default (80 % of RAM) let one day of 64 GPUs reach 15 GB RSS; with the bound,
    larger intermediates (sorts, hash tables) spill to the temp directory and a day's run stays
    under 4 GB RSS whatever its size (bench/results/memory.json: peak RSS and CPU cost).
    """
    memory = memory or f"{default_memory_mb()}MB"
    config: dict = {"preserve_insertion_order": False, "memory_limit": memory}
    if threads:
        config["threads"] = threads
    return config


def derived_tables(data_dir: Path) -> list[str]:
    root = data_dir / DERIVED_DIR
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("date=*/**/*.parquet")))


def day_parts(data_dir: Path, table: str, date: str) -> list[Path]:
    """The Parquet parts of ``table`` for ``date``: the fleet-day's and every cluster-day's."""
    return sorted((derived_path(data_dir, table) / f"date={date}").rglob("*.parquet"))


def read_day(data_dir: Path, table: str, date: str) -> pa.Table:
    """Every row of ``table`` for ``date``, part after part (raises FileNotFoundError if none)."""
    parts = day_parts(data_dir, table, date)
    if not parts:
        raise FileNotFoundError(f"no part of {table} for {date} under {derived_path(data_dir, table)}")
    tables = [pq.read_table(p) for p in parts]
    unified = pa.unify_schemas([t.schema for t in tables], promote_options="permissive")
    schema = pa.schema([f.with_nullable(True) for f in unified])  # NOT NULL flags vary with the writer, not the data
    return pa.concat_tables([t.cast(schema) for t in tables])


def _parts_pattern(table: str, cluster: str | None = None) -> str:
    """Every part of ``table`` (the fleet-day's and each cluster-day's), or one cluster's parts,
    as a glob relative to the data dir."""
    if cluster:
        check_path_name(cluster, "cluster")  # a name in a glob: no wildcard, no '/'
        return f"{DERIVED_DIR}/{table}/date=*/cluster={cluster}/*.parquet"
    return f"{DERIVED_DIR}/{table}/date=*/**/*.parquet"


def _dataset_source(data_dir: Path, dataset: str) -> str:
    """What the catalog's view of a raw dataset reads: its glob, or, while a symbolic link sits
    where the glob would follow it (datadir.linked_paths), each real folder's ``*.parquet`` and the
    files of a folder holding a linked file one by one, so no view reads through a link."""
    links = linked_paths(data_dir, dataset)
    if not links:
        return pattern_literal(data_dir, DATASETS[dataset].glob())
    files = raw_files(data_dir, dataset)
    listed = {link.parent for link in links}
    sources = []
    for folder in sorted({f.parent for f in files}):
        if folder in listed:
            sources += [path_literal(f) for f in files if f.parent == folder]
        else:
            sources.append(pattern_literal(folder, "*.parquet"))
    return "[" + ", ".join(sources) + "]"


def _raw_relation_sql(data_dir: Path, dataset: str, files: list[Path] | None = None, where: str | None = None) -> str:
    if files is not None:
        source = "[" + ", ".join(path_literal(f) for f in files) + "]"
    else:
        source = _dataset_source(data_dir, dataset)
    if not ADDED_COLUMNS.get(dataset):
        sql = f"SELECT * FROM read_parquet({source}, hive_partitioning = true, hive_types = {{'date': DATE}})"
        return f"{sql} WHERE {where}" if where else sql
    # Files written before a column was added lack it: read by name, and union with the typed empty
    # relation so the column is there (NULL) even when no file of the glob has it.
    sql = f"SELECT * FROM read_parquet({source}, hive_partitioning = true, hive_types = {{'date': DATE}}, union_by_name = true)"
    sql = f"{sql} WHERE {where}" if where else sql
    columns = ", ".join(f.name for f in DATASETS[dataset].schema) + ", date"
    return f"SELECT {columns} FROM ({sql} UNION ALL BY NAME {_empty_relation_sql(dataset)})"


_LEVELED: dict[tuple, bool] = {}
"""Whether parts have level/entity columns, by the parts' paths and file identities: a compute
connection asks it of every table it defines, and the answer changes only when a part does."""


def _has_levels(con: duckdb.DuckDBPyConnection, relation: str, parts: list[Path]) -> bool:
    key = (relation, *((str(p), *(_file_id(p) or ())) for p in parts))
    if key not in _LEVELED:
        if len(_LEVELED) > 4096:
            _LEVELED.clear()
        names = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}
        _LEVELED[key] = {"level", "entity"} <= names
    return _LEVELED[key]


def _derived_view_sql(data_dir: Path, table: str, scope: Scope | None = None, con: duckdb.DuckDBPyConnection | None = None) -> str:
    """The view of ``table``: all its parts; inside a cluster scope only that cluster's part,
    its cluster_role rows read back as role (see pipeline/scope.py)."""
    cluster = scope.cluster if scope else None
    parts = sorted(p for p in data_dir.glob(_parts_pattern(table, cluster)) if p.is_file()) if cluster else []
    if parts:
        source = f"read_parquet({pattern_literal(data_dir, _parts_pattern(table, cluster))}, hive_partitioning = false)"
        leveled = con is not None and _has_levels(con, source, parts)
        body = read_back_sql(source, cluster) if leveled else f"SELECT * FROM {source}"
    else:  # the whole table; a cluster without its part of it yet sees it typed and empty
        source = f"read_parquet({pattern_literal(data_dir, _parts_pattern(table))}, hive_partitioning = false)"
        body = f"SELECT * FROM {source}" + (" WHERE false" if cluster else "")
    return f"CREATE OR REPLACE VIEW {table} AS {body}"


@functools.cache
def _empty_relation_sql(dataset: str) -> str:
    """A typed, empty relation for a dataset that has no files yet, so queries still bind (once
    per process: it opens a DuckDB connection of its own)."""
    con = duckdb.connect()
    con.register("_empty", pa.table({f.name: pa.array([], f.type) for f in DATASETS[dataset].schema}))
    cols = con.execute("DESCRIBE SELECT * FROM _empty").fetchall()
    con.close()
    typed = ", ".join(f"NULL::{ctype} AS {name}" for name, ctype, *_ in cols)
    return f"SELECT {typed}, NULL::DATE AS date WHERE false"


def _create_inventory_tables(con: duckdb.DuckDBPyConnection, inventory: Inventory | None) -> None:
    tables = {
        "inventory_gpus": (inventory.gpu_rows() if inventory else [], _INVENTORY_GPUS),
        "inventory_entities": (entity_rows(inventory) if inventory else [], _INVENTORY_ENTITIES),
        "inventory_endpoints": (inventory.workload_rows("endpoint") if inventory else [], _INVENTORY_ENDPOINTS),
        "inventory_jobs": (inventory.workload_rows("job") if inventory else [], _INVENTORY_JOBS),
    }
    for name, (rows, schema) in tables.items():
        con.register(f"_{name}", pa.Table.from_pylist(rows, schema=schema))
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _{name}")
        con.unregister(f"_{name}")


_JOB_EVENT_RUNS = """
WITH e AS (SELECT job, host, epoch_ns(start_ts) AS a, epoch_ns(end_ts) AS b FROM {events} WHERE end_ts > start_ts),
m AS (SELECT *, max(b) OVER (PARTITION BY job, host ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM e),
r AS (SELECT *, sum((reach IS NULL OR a > reach)::INT) OVER (PARTITION BY job, host ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS run FROM m)
SELECT job, host, min(a), max(b) FROM r GROUP BY job, host, run ORDER BY ALL
"""
"""A job's events on a host merged into runs (events that touch or overlap are one run)."""

_EVENT_COLUMNS = ["job", "host", "start_ts", "end_ts"]

_JOB_EVENTS_EARLIER_VIEW = """
CREATE OR REPLACE VIEW job_events_earlier AS SELECT {columns} FROM job_events
WHERE date < getvariable('partition_date')::DATE AND date >= getvariable('partition_date')::DATE - {lookback_days}
  AND end_ts > getvariable('partition_date')::DATE::TIMESTAMPTZ
"""
"""In a reader's catalog, what a computed day's temp table ``job_events_earlier`` holds
(:func:`_job_event_runs`): the earlier days' events still running after the ``partition_date``'s
midnight, so a table's SQL file (training_energy) runs there as-is once the day is set."""


def _job_event_runs(con: duckdb.DuckDBPyConnection, data_dir: Path, lookback_days: int) -> list[tuple[str, str, int, int]]:
    """Runs of job events (job, host, start ns, end ns) that can hold a GPU on the computed day:
    those of the day's ``job_events`` and, since a file of job_events goes by the day its event
    starts, the runs of earlier days' events that reach past midnight, from where they started (a
    run that started yesterday holds its GPUs today too). Earlier days are read ``lookback_days``
    back (the job_events_lookback_days setting, collectors/settings.py): an event longer than a day still holds
    its GPUs on the third. Those earlier events that end after midnight are also kept whole in the
    table ``job_events_earlier`` (training_energy counts their part inside the day). An earlier
    file that cannot be read is left out here: its own day's run quarantines it and says so."""
    day = con.execute("SELECT getvariable('partition_date')::VARCHAR").fetchall()[0][0]
    if day is None:  # a reader's catalog: job_events holds every day
        return con.execute(_JOB_EVENT_RUNS.format(events="job_events")).fetchall()
    midnight = int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp()) * 10**9
    tables = []
    for back in range(1, lookback_days + 1):
        earlier = (dt.date.fromisoformat(day) - dt.timedelta(days=back)).isoformat()
        for f in raw_files(data_dir, "job_events", earlier):
            try:
                tables.append(pq.read_table(f, columns=JOB_EVENTS.names).cast(JOB_EVENTS))
            except (OSError, pa.ArrowException, ValueError):
                continue
    con.register("_job_events_before", pa.concat_tables(tables) if tables else JOB_EVENTS.empty_table())
    try:
        con.execute("CREATE OR REPLACE TABLE job_events_earlier AS SELECT * FROM _job_events_before "
                    f"WHERE epoch_ns(end_ts) > {midnight}")
        events = f"(SELECT {', '.join(_EVENT_COLUMNS)} FROM job_events UNION ALL SELECT {', '.join(_EVENT_COLUMNS)} FROM _job_events_before)"
        return [r for r in con.execute(_JOB_EVENT_RUNS.format(events=events)).fetchall() if r[3] > midnight]
    finally:
        con.unregister("_job_events_before")


def _create_gpu_assignments(
    con: duckdb.DuckDBPyConnection, data_dir: Path, inventory: Inventory | None, full_inventory: Inventory | None = None,
    stored: list[dict] | None = None, lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS,
) -> None:
    """Table `gpu_assignments` (host, gpu, kind, name, from_ts, to_ts, from_ns, to_ns, source): which
    endpoint or job holds each GPU when (collectors/assignments.py), from the inventory, the
    assignments dataset and the job_events this connection sees (for a day: its own and the
    earlier days' runs into it; table ``job_events_earlier``, empty without an inventory). A computation (partition_date set) stops on a conflict between
    sources; the catalog keeps the first, so it still opens. ``inventory`` is the scope's (a
    cluster's hosts); assignments are read from the whole ``full_inventory`` and kept for those
    hosts, so an endpoint another cluster declares can still hold this one's GPUs. ``stored``: the
    assignments dataset's accepted rows where the caller has read them already (stored_assignments)."""
    held: list[assignments.Held] = []
    computing = con.execute("SELECT getvariable('partition_date') IS NOT NULL").fetchall()[0][0]
    if computing:
        con.register("_no_events", JOB_EVENTS.empty_table())
        con.execute("CREATE OR REPLACE TABLE job_events_earlier AS SELECT * FROM _no_events")  # replaced by _job_event_runs
        con.unregister("_no_events")
    else:  # a reader's catalog: the same events from job_events (every day), once a day is set
        con.execute(_JOB_EVENTS_EARLIER_VIEW.format(columns=", ".join(JOB_EVENTS.names), lookback_days=int(lookback_days)))
    if inventory is not None:
        hosts = {h.name for _, _, h in inventory.iter_hosts()}
        held = [h for h in assignments.static_held(full_inventory or inventory) if h.host in hosts]
        good = stored if stored is not None else stored_assignments(full_inventory or inventory, data_dir)
        held += [h for h in assignments.rows_held(good) if h.host in hosts]
        held += assignments.job_event_held(inventory, _job_event_runs(con, data_dir, lookback_days))  # only (job, host) pairs this inventory lists
    try:
        resolved = assignments.resolve(held, strict=bool(computing))
    except assignments.AssignmentConflict as exc:
        raise WarehouseError(f"assignments disagree: {exc}") from None
    con.register("_gpu_assignments", assignments.resolved_table(resolved))
    con.execute("CREATE OR REPLACE TABLE gpu_assignments AS SELECT * FROM _gpu_assignments ORDER BY host, gpu, from_ns")
    con.unregister("_gpu_assignments")


_INVENTORY_GPUS = pa.schema(
    [
        ("fleet", pa.string()),
        ("cluster", pa.string()),
        ("host", pa.string()),
        ("role", pa.string()),
        ("gpu", pa.uint8()),
        ("tdp_w", pa.float64()),
        ("gpu_model", pa.string()),
        ("endpoint", pa.string()),
        ("job", pa.string()),
        ("endpoint_tz_offset_h", pa.float64()),
        ("host_provisioned_w", pa.float64()),
        ("cluster_provisioned_w", pa.float64()),
        ("uuid", pa.string()),
        ("power_limit_w", pa.float64()),
    ]
)


def _workload_schema(kind: str) -> pa.Schema:
    """One row per endpoint (job) and host: the model it serves (trains) and how it is split."""
    return pa.schema(
        [
            ("fleet", pa.string()),
            ("cluster", pa.string()),
            ("host", pa.string()),
            (kind, pa.string()),
            ("gpus", pa.int64()),
            ("model", pa.string()),
            ("params_b", pa.float64()),
            ("active_params_b", pa.float64()),
            ("precision", pa.string()),
            ("tp", pa.int64()),
            ("pp", pa.int64()),
            *([("dp", pa.int64())] if kind == "job" else []),
            ("gpus_per_replica", pa.int64()),
            ("engine", pa.string()),
            ("tz_offset_h", pa.float64()),
        ]
    )


_INVENTORY_ENDPOINTS = _workload_schema("endpoint")
_INVENTORY_JOBS = _workload_schema("job")

_INVENTORY_ENTITIES = pa.schema(
    [
        ("level", pa.string()),
        ("entity", pa.string()),
        ("provisioned_w", pa.float64()),
        ("tdp_w", pa.float64()),
        ("gpus", pa.int64()),
    ]
)


def cluster_inventory(inventory: Inventory, cluster: str) -> Inventory:
    """The inventory cut down to one cluster (its fleet holding only that cluster)."""
    for fleet in inventory.fleets:
        for c in fleet.clusters:
            if c.name == cluster:
                return inventory.model_copy(update={"fleets": [fleet.model_copy(update={"clusters": [c]})]})
    raise WarehouseError(f"cluster {cluster!r} is not in the inventory")


def remove_stale_parts(
    data_dir: Path, date: str, clusters: list[str], url: str | None = None, tables: list[str] | None = None,
) -> list[Path]:
    """Delete the day's parts of clusters that are not among ``clusters`` (a cluster gone from
    the inventory, or hosts once unassigned and now listed), so a re-run day holds exactly
    its current cluster-days' rows; with an ``s3://`` ``url``, its objects too. ``tables``: only
    these tables' parts (None: every table's). Returns the local folders removed."""
    keep = {f"cluster={c}" for c in clusters}
    stale = [f for f in (data_dir / DERIVED_DIR).glob(f"*/date={date}/cluster=*")
             if f.is_dir() and f.name not in keep and (tables is None or f.parent.parent.name in tables)]
    for folder in stale:
        shutil.rmtree(folder)
    if url is not None:
        remote.delete_stale_objects(url, date, clusters, tables)  # no-op for a local data dir
    return stale


def _in_list(column: str, values: list[str]) -> str:
    return f"{column} IN ({', '.join(literal(v) for v in values)})" if values else "false"


def create_views(
    con: duckdb.DuckDBPyConnection,
    data_dir: Path,
    *,
    kind: str = "VIEW",
    raw_overrides: dict[str, list[Path]] | None = None,
    scope: Scope | None = None,
    lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS,
) -> None:
    """Define the raw datasets, derived tables, inventory tables and shared macros on ``con``;
    with a ``scope``, as that cluster-day or fleet-day sees them (pipeline/scope.py: a fleet-day
    sees no raw power samples and no per-GPU table). ``lookback_days``: how many earlier days'
    job_events a computed day reads (the job_events_lookback_days setting)."""
    raw_overrides = raw_overrides or {}
    inventory = full_inventory = load_inventory_if_any(data_dir)
    stored = None  # the assignments dataset, read once for the cluster's members and gpu_assignments
    filters: dict[str, str] = {}
    if scope and scope.cluster == UNASSIGNED:  # hosts missing from the inventory: per GPU only
        known = [h.name for _, _, h in inventory.iter_hosts()] if inventory else []
        inventory = None
        filters = {"power": f"NOT ({_in_list('host', known)})", "requests": "false", "job_events": f"NOT ({_in_list('host', known)})"}
    elif scope and scope.cluster:
        if inventory is None:
            raise WarehouseError(f"no {INVENTORY_FILE}: cannot tell which hosts are in cluster {scope.cluster!r}")
        stored = stored_assignments(inventory, data_dir)
        hosts, endpoints = cluster_members(inventory, scope.cluster, stored)
        full_inventory, inventory = inventory, cluster_inventory(inventory, scope.cluster)
        filters = {"power": _in_list("host", hosts), "requests": _in_list("endpoint", endpoints), "job_events": _in_list("host", hosts)}
    for name in DATASETS:
        files = raw_overrides.get(name)
        if (scope and scope.fleet and name == "power") or (files is None and not raw_files(data_dir, name)) or (files is not None and not files):
            body = _empty_relation_sql(name)
        else:
            body = _raw_relation_sql(data_dir, name, files, filters.get(name))
        con.execute(f"CREATE OR REPLACE {kind} {name} AS {body}")
        if files is not None:  # the exact file list behind the view, for checks that name files
            listed = ", ".join(path_literal(f) for f in files)
            con.execute(f"SET VARIABLE files_{name} = [{listed}]::VARCHAR[]")
    if scope is not None:
        con.execute(f"SET VARIABLE scope = {literal('cluster' if scope.cluster else 'fleet')}")
        con.execute(f"SET VARIABLE cluster = {literal(scope.cluster) if scope.cluster else 'NULL'}")
    for table in derived_tables(data_dir):
        if not (scope and scope.fleet and table in PER_GPU_TABLES):
            con.execute(_derived_view_sql(data_dir, table, scope, con))
    if scope and scope.fleet:
        for table, columns in PER_GPU_COLUMNS.items():
            con.execute(f"CREATE OR REPLACE VIEW {table} AS {empty_relation_sql(columns)}")
    present = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    for table, columns in ALWAYS_DEFINED.items():
        if table not in present:
            con.execute(f"CREATE OR REPLACE VIEW {table} AS {empty_relation_sql(columns)}")
    _create_inventory_tables(con, inventory)
    _create_gpu_assignments(con, data_dir, inventory, full_inventory, stored, lookback_days)
    con.execute(f"CREATE OR REPLACE VIEW quarantined_files AS {file_quarantine.view_sql(data_dir)}")
    _execute_all(con, sqlfiles.macros())
    if scope is None and kind == "VIEW":  # a reader's catalog: say what the columns mean
        describe_columns(con)


def describe_columns(con: duckdb.DuckDBPyConnection) -> None:
    """``COMMENT ON`` each view, table and column the declarations explain (pipeline/columns.py), so
    ``describe`` in ``wattline sql`` and ``duckdb_columns()`` say what a column means, and
    ``duckdb_views()``/``duckdb_tables()`` what each relation holds."""
    present: dict[str, list[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal AND schema_name = current_schema() "
        "AND database_name = current_database()"
    ).fetchall():
        present.setdefault(table, []).append(column)
    views = {name for (name,) in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = current_schema() AND database_name = current_database()"
    ).fetchall()}
    _execute_all(con, columns.comment_statements(present, views))


def _execute_all(con: duckdb.DuckDBPyConnection, statements: list[str] | tuple[str, ...]) -> None:
    """Run ``statements`` as one script: one call into DuckDB instead of one per statement (each
    ``;`` on a line of its own, so a statement's trailing ``--`` comment cannot swallow it)."""
    if statements:
        con.execute("\n;\n".join(statements))


@contextlib.contextmanager
def compute_connection(
    data_dir: Path,
    date: str | None = None,
    raw_overrides: dict[str, list[Path]] | None = None,
    scope: Scope | None = None,
    *,
    memory: str | None = None,
    threads: int | None = None,
    lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB with every dataset as a view and ``partition_date`` set; ``memory``
    and ``threads`` bound it (None: the defaults, see :func:`duckdb_config`); ``lookback_days``
    as :func:`create_views` takes it."""
    con = _open_compute_connection(data_dir, date, raw_overrides, scope, memory, threads, lookback_days)
    try:
        yield con
    finally:
        con.close()
        process_memory.release_pools()


def _open_compute_connection(
    data_dir: Path, date: str | None, raw_overrides: dict[str, list[Path]] | None, scope: Scope | None,
    memory: str | None, threads: int | None, lookback_days: int,
) -> duckdb.DuckDBPyConnection:
    """:func:`compute_connection`'s connection, set up (the caller closes it)."""
    config = duckdb_config(memory, threads)
    spill = data_dir / ".duckdb_tmp"
    spill.mkdir(parents=True, exist_ok=True)
    config["temp_directory"] = str(spill)
    con = duckdb.connect(":memory:", config=config)
    try:
        _execute_all(con, _SESSION_SETTINGS)
        if date is not None:
            if not _DATE.match(date):
                raise ValueError(f"bad partition date {date!r}")
            con.execute(f"SET VARIABLE partition_date = DATE '{date}'")
        con.execute(f"SET VARIABLE data_dir = {literal(str(data_dir))}")
        create_views(con, data_dir, raw_overrides=raw_overrides, scope=scope, lookback_days=lookback_days)
    except BaseException:
        con.close()
        raise
    return con


_SESSION_SETTINGS = ("SET TimeZone = 'UTC'", "SET enable_progress_bar = false", "SET python_enable_replacements = false")
"""A compute connection's own settings (DuckDB keeps them per connection; its variables too).
``enable_progress_bar = false``: worker processes share one terminal. ``python_enable_replacements
= false``: a name the catalog lacks is an error, not a Python variable of the calling frame found by
a replacement scan (a check's FROM power_1s, its table not built, bound the Dagster asset of that
name); Python data is registered by name (con.register)."""


@dataclass
class _SharedCatalog:
    """A compute connection kept for the next step of the same run and scope (see
    :func:`shared_compute_connection`)."""

    key: tuple
    con: duckdb.DuckDBPyConnection
    variables: list[tuple[str, Any, str]]
    busy: bool = False


_kept: _SharedCatalog | None = None  # the last run and scope's, for its next step
_SHARED_LOCK = threading.Lock()


def close_shared() -> None:
    """Close the compute connection kept for a run's next step (the run is over)."""
    global _kept
    with _SHARED_LOCK:
        kept, _kept = _kept, None
    if kept is not None:
        kept.con.close()
        process_memory.release_pools()


def _variables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, Any, str]]:
    """``con``'s variables as (name, Python value, DuckDB type): a list of paths stays a list
    (its text form would split a path with a comma)."""
    kinds = con.execute("SELECT name, type FROM duckdb_variables() ORDER BY name").fetchall()
    for name, _ in kinds:
        _check_ident(name)
    values = con.execute(f"SELECT {', '.join(f'getvariable({literal(n)})' for n, _ in kinds)}").fetchone() if kinds else ()
    return [(name, value, kind) for (name, kind), value in zip(kinds, values or (), strict=True)]


@contextlib.contextmanager
def shared_compute_connection(
    share: str,
    data_dir: Path,
    date: str,
    raw_overrides: dict[str, list[Path]],
    scope: Scope,
    *,
    memory: str | None = None,
    threads: int | None = None,
    lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`compute_connection` for one step of run ``share``: the views, macros, inventory and
    assignment tables are built once for the run's steps of the same scope and raw files (one
    in-memory database, ~0.1 s CPU a step on a tiny day, most of a small step's cost), and each
    step gets a connection of its own on that database (``cursor``): its temp tables, registered
    relations, variables and settings are its own and go with it, as with a fresh connection. A
    step that writes a part points the shared view at it (:func:`write_partition`), as the next
    step's fresh connection would see it. A step that fails takes the database with it. One
    database is kept, the last run and scope's: :func:`close_shared` closes it at a run's end."""
    key = (share, str(data_dir), date, scope, memory, threads, lookback_days,
           tuple(sorted((name, tuple(map(str, files))) for name, files in raw_overrides.items())))
    global _kept
    with _SHARED_LOCK:
        held = _kept if _kept is not None and _kept.key == key and not _kept.busy else None
        if held is not None:
            held.busy = True
        elif _kept is not None and not _kept.busy:  # another run's or scope's: done with
            _kept.con.close()
            _kept = None
    if held is None:
        base = _open_compute_connection(data_dir, date, raw_overrides, scope, memory, threads, lookback_days)
        variables = _variables(base)
        held = _SharedCatalog(key, base, variables, busy=True)
        with _SHARED_LOCK:
            if _kept is None:
                _kept = held
    cur = held.con.cursor()
    ok = False
    try:
        _execute_all(cur, _SESSION_SETTINGS)
        for name, value, kind in held.variables:
            if kind == '"NULL"':
                cur.execute(f"SET VARIABLE {name} = NULL")
            else:
                cur.execute(f"SET VARIABLE {name} = CAST(? AS {kind})", [value])
        yield cur
        ok = True
    finally:
        cur.close()
        with _SHARED_LOCK:
            held.busy = False
            if not ok or held is not _kept:
                if held is _kept:
                    _kept = None
                held.con.close()
        process_memory.release_pools()  # what the step freed, before the next step's peak builds on it


PARQUET_COPY_OPTIONS = f"FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {PART_ROW_GROUP_ROWS}, PARQUET_VERSION V2"
"""How every SQL table's part is written. V2: delta-packed integers and timestamps, split-stream
floats. Lossless: the values and the schema DuckDB reads back are the same as with V1."""

DICTIONARY_SIZE_LIMIT = 1000
"""Entries of a column's dictionary (distinct values in a row group, whatever their size: so DuckDB
2.0 reads its DICTIONARY_SIZE_LIMIT) above which DuckDB writes the column with V2's value encodings
instead: a time or power column of 100 ms rows has too many distinct values for a dictionary to
pay (capture 4 tiled over 8 GPUs x 2 h: the SQL-written tables 9.7 MB with V1's defaults, 8.7 MB
with V2, 3.1 MB with V2 and this limit; write CPU 0.81 -> 0.54 s); a host, phase or endpoint
column keeps its dictionary."""

DICTIONARY_SIZE_LIMITS = {"phase_timeline": 10_000}
"""Tables whose dictionaries pay up to a larger size: phase_timeline's request counts and tokens
repeat across an endpoint's GPUs (simulated tiny day: 2.82 MB at 1000, 2.25 MB at 10 000; the
capture tile 1.0 MB at either)."""


def write_partition(
    con: duckdb.DuckDBPyConnection, data_dir: Path, table: str, date: str, query: str, scope: Scope | None = None
) -> int:
    """Replace ``table``'s part for ``date`` (and ``scope``'s cluster) with the rows of ``query``;
    returns the row count.

    The file is written beside its final name and renamed over it, so a reader sees the old
    part or the new one, never a mix; re-running a day replaces it (idempotent). A cluster-day
    stores its role rows as cluster_role and drops its fleet rows; a fleet-day keeps only role
    and fleet rows (pipeline/scope.py).
    """
    _check_ident(table)
    if not _DATE.match(date):
        raise ValueError(f"bad partition date {date!r}")
    scope = scope or Scope(date=date)
    query = scoped_rows_sql(con, table, query, scope)
    folder = scope.part_dir(data_dir, table) if scope.cluster else derived_path(data_dir, table) / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / "part-0.parquet"
    # Not ending in .parquet: DuckDB's glob matches dot-files, and a reader of the view must
    # never see the half-written (or the complete, not yet renamed) copy beside the old one.
    tmp = folder / f"{TMP_PREFIX}part-0.parquet.{uuid.uuid4().hex[:8]}"
    try:
        limit = DICTIONARY_SIZE_LIMITS.get(table, DICTIONARY_SIZE_LIMIT)
        con.execute(f"COPY ({query}) TO {literal(str(tmp))} ({PARQUET_COPY_OPTIONS}, DICTIONARY_SIZE_LIMIT {limit})")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(folder)
    finally:
        tmp.unlink(missing_ok=True)
    con.execute(_derived_view_sql(data_dir, table, scope, con))
    return con.execute(f"SELECT count(*) FROM read_parquet({path_literal(final)})").fetchall()[0][0]


def install_part(con: duckdb.DuckDBPyConnection, data_dir: Path, table: str, scope: Scope, written: Path) -> int:
    """Rename ``written`` (a complete part, beside its final name in the part's folder) over
    ``table``'s part for ``scope`` (a reader sees the old part or the new one) and point ``con``'s
    view at it; returns its row count."""
    folder = scope.part_dir(data_dir, table)
    with open(written, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(written, folder / "part-0.parquet")
    fsync_dir(folder)
    con.execute(_derived_view_sql(data_dir, table, scope, con))
    return pq.ParquetFile(folder / "part-0.parquet").metadata.num_rows


DUCKDB_ZSTD_LEVEL = 3
"""DuckDB's COPY compresses at zstd level 3 (pyarrow's default is 1)."""


def distinct_at_most(column: pa.Array, limit: int) -> bool:
    """Whether ``column`` holds at most ``limit`` distinct non-null values. A prefix of 8 x ``limit``
    rows with more already answers (the whole column then has more): a column of instants or
    measured values is not hashed whole for that."""
    if pa.types.is_dictionary(column.type):
        return len(pc.unique(column.indices).drop_null()) <= limit
    if len(column) > 8 * limit and pc.count_distinct(column.slice(0, 8 * limit)).as_py() > limit:
        return False
    return pc.count_distinct(column).as_py() <= limit


def _rows_encodings(first: pa.Table, dictionary_limit: int) -> tuple[list[str], dict[str, str]]:
    """The Parquet encodings of a Python table's columns, as DuckDB's COPY with PARQUET_VERSION V2
    and ``DICTIONARY_SIZE_LIMIT`` chooses them, from the part's first row group (DuckDB chooses per
    row group): a dictionary where the column holds at most ``dictionary_limit`` distinct values,
    else delta-packed integers, dates and timestamps, split-stream floats and delta-length
    strings; booleans plain. Returns (dictionary columns, the others' encodings)."""
    dictionary, encodings = [], {}
    for field in first.schema:
        column = first[field.name].combine_chunks()
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_boolean(kind):
            encodings[field.name] = "PLAIN"
            continue
        if distinct_at_most(column, dictionary_limit):
            dictionary.append(field.name)
        elif pa.types.is_floating(kind):
            encodings[field.name] = "BYTE_STREAM_SPLIT"
        elif pa.types.is_integer(kind) or pa.types.is_temporal(kind):
            encodings[field.name] = "DELTA_BINARY_PACKED"
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            encodings[field.name] = "DELTA_LENGTH_BYTE_ARRAY"
        else:
            encodings[field.name] = "PLAIN"
    return dictionary, encodings


def write_rows_partition(
    con: duckdb.DuckDBPyConnection, data_dir: Path, table: str, scope: Scope, rows: pa.RecordBatchReader
) -> int:
    """Replace ``table``'s part for ``scope`` with ``rows`` (a Python table's, streamed: one row
    group in memory), written by pyarrow's ParquetWriter in the stream's order; returns the row
    count. Rows ``scope`` does not own (scoped_rows_sql) are cut on ``con`` on the way. As
    write_partition: beside the final name, then renamed over it (install_part).

    Why not DuckDB's COPY: it turns every dictionary-encoded string of the stream into a string
    and hashes it back into the column's dictionary; pyarrow writes the stream's dictionaries as
    they are. The values and the schema DuckDB reads back are the same (VARCHAR for a dictionary of
    strings), and so are the encodings (_rows_encodings)."""
    relation = f"_{table}_part_rows"
    whole = f"SELECT * FROM {relation}"
    query = _scoped_sql(table, set(rows.schema.names), whole, scope)
    folder = scope.part_dir(data_dir, table)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{TMP_PREFIX}part-0.parquet.{uuid.uuid4().hex[:8]}"
    writer: pq.ParquetWriter | None = None
    try:
        if query != whole:  # the scope's rows, through DuckDB (in the stream's order where the caller keeps insertion order)
            con.register(relation, rows)
            rows = con.sql(query).to_arrow_reader(PART_ROW_GROUP_ROWS)
        limit = DICTIONARY_SIZE_LIMITS.get(table, DICTIONARY_SIZE_LIMIT)

        def write(group: pa.Table) -> None:
            nonlocal writer
            if writer is None:  # the encodings from the first row group's values
                dictionary, encodings = _rows_encodings(group, limit)
                writer = pq.ParquetWriter(tmp, rows.schema, compression="zstd", compression_level=DUCKDB_ZSTD_LEVEL, store_schema=False,
                                          use_dictionary=dictionary, column_encoding=encodings or None,
                                          max_rows_per_page=PART_PAGE_ROWS, data_page_size=1 << 30)
            write_group(writer, group)

        groups = RowGroups(rows.schema, write)
        for batch in rows:
            groups.add(batch)
        groups.finish()
        if writer is None:  # a part without rows still has the schema
            write(rows.schema.empty_table())
        assert writer is not None
        writer.close()
        writer = None
        return install_part(con, data_dir, table, scope, tmp)
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
        if query != whole:
            con.unregister(relation)


def scoped_rows_sql(con: duckdb.DuckDBPyConnection, table: str, query: str, scope: Scope) -> str:
    """``query`` cut to the rows ``scope`` owns of ``table``."""
    if scope.cluster is None and not scope.fleet:
        return query
    return _scoped_sql(table, {row[0] for row in con.execute(f"DESCRIBE {query}").fetchall()}, query, scope)


def _scoped_sql(table: str, names: set[str], query: str, scope: Scope) -> str:
    """scoped_rows_sql of a query whose columns are ``names``."""
    if scope.cluster is None and not scope.fleet:
        return query
    if {"level", "entity"} <= names:
        return store_rows_sql(query, scope.cluster) if scope.cluster else f"SELECT * FROM ({query}) WHERE level IN ('role', 'fleet')"
    if table in ROLE_ROW_TABLES:  # per role and endpoint: endpoints are per cluster, roles fleet-wide
        return f"SELECT * FROM ({query}) WHERE " + ("entity <> role" if scope.cluster else "entity = role")
    return query


@contextlib.contextmanager
def _publish_lock(data_dir: Path) -> Iterator[None]:
    with exclusive_lock(data_dir / ".warehouse.lock"):
        yield


CATALOG_STATE = ".warehouse.inputs.json"
"""Beside the catalog: what the catalog in place was built from (:func:`_catalog_inputs`), the
file it is (inode, size, mtime) and each derived view's columns, so a publish after a part can tell
whether the catalog already holds all it would hold when rebuilt."""


def _write_catalog(path: Path, data_dir: Path) -> dict[str, list[str]]:
    """Build the catalog at ``path`` in one transaction (a statement-per-commit file DuckDB spent
    most of its time writing its log); returns each derived view's columns."""
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("BEGIN")
        tables = derived_tables(data_dir)  # listed first: a table whose first part lands meanwhile is added next time
        create_views(con, data_dir)
        con.execute(f"CREATE TABLE {CATALOG_INFO} AS SELECT {literal(str(data_dir))} AS data_dir, now() AS built_at")
        _execute_all(con, columns.comment_statements({CATALOG_INFO: ["data_dir", "built_at"]}))
        views = _view_columns(con, tables)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        return views
    finally:
        con.close()


def _add_to_catalog(path: Path, data_dir: Path, tables: list[str]) -> dict[str, list[str]]:
    """Define (again) the views of ``tables`` in the catalog copy at ``path``, with their comments,
    in one transaction; returns their columns. Every other relation of the catalog stays as built:
    views bind their files and one another when queried, so nothing else depends on them."""
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("BEGIN")
        for table in tables:
            con.execute(_derived_view_sql(data_dir, table))
        views = _view_columns(con, tables)
        _execute_all(con, columns.comment_statements(views, views=set(views)))
        con.execute(f"UPDATE {CATALOG_INFO} SET built_at = now()")
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        return views
    finally:
        con.close()


def _view_columns(con: duckdb.DuckDBPyConnection, tables: list[str]) -> dict[str, list[str]]:
    """The columns of each of ``tables`` as ``con``'s views bind them now."""
    found: dict[str, list[str]] = {t: [] for t in tables}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal AND schema_name = current_schema() "
        "AND database_name = current_database() ORDER BY table_name, column_index"
    ).fetchall():
        if table in found:
            found[table].append(column)
    return found


def _in_local_folder(tmp: Path, build) -> dict[str, list[str]]:
    """Run ``build(path)`` on ``tmp``. DuckDB 2.0 takes a ``?`` in a database path for the start of
    URL parameters (it names the WAL ``d.wal?x/file`` and fails): for such a data dir the catalog
    is built in the system's temporary folder and copied to ``tmp`` (a few hundred KB)."""
    if "?" not in str(tmp):
        return build(tmp)
    with tempfile.TemporaryDirectory(prefix="wattline-catalog-") as folder:
        built = Path(folder) / "catalog.duckdb"
        if tmp.exists():
            shutil.copyfile(tmp, built)
        views = build(built)
        shutil.copyfile(built, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        return views


def _build_catalog(tmp: Path, data_dir: Path) -> dict[str, list[str]]:
    """Write the catalog to ``tmp``; returns each derived view's columns."""
    return _in_local_folder(tmp, lambda path: _write_catalog(path, data_dir))


def _file_id(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


@functools.cache
def _code_version() -> str:
    """A digest of the code and SQL that shape a catalog, and of DuckDB's version: a new wattline
    rebuilds the catalog its predecessor left."""
    digest = hashlib.sha256(duckdb.__version__.encode())
    root = Path(__file__).resolve().parent.parent
    for folder, pattern in (("pipeline", "**/*.py"), ("collectors", "**/*.py"), ("sql", "**/*")):
        for path in sorted((root / folder).glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _catalog_inputs(data_dir: Path) -> str:
    """A digest of everything the catalog holds but its derived views: the data dir it names, the
    code, whether each raw dataset has files and which links sit in its way (its view reads a glob,
    so new files of a day need no new catalog), the inventory, the assignments and job_events files
    (gpu_assignments is materialized from them) and whether anything was ever quarantined."""
    digest = hashlib.sha256(_code_version().encode())
    digest.update(str(data_dir).encode())
    for name in DATASETS:
        files, links = dataset_paths(data_dir, name)
        digest.update(f"\0{name} {bool(files)}".encode())
        for link in sorted(links):
            digest.update(f"\0{link} -> {os.readlink(link)}".encode())
        if name == "job_events":
            for f in sorted(files):
                digest.update(f"\0{f} {_file_id(f)}".encode())
    for f in sorted((data_dir / ASSIGNMENTS_DIR).glob("*.parquet")):
        digest.update(f"\0{f} {_file_id(f)}".encode())
    inventory = data_dir / INVENTORY_FILE
    digest.update(b"\0inventory " + (inventory.read_bytes() if inventory.is_file() else b"-"))
    log = file_quarantine.log_dir(data_dir)
    digest.update(f"\0quarantine {log.is_dir() and any(log.glob('*.parquet'))}".encode())
    return digest.hexdigest()


def _read_state(data_dir: Path) -> dict | None:
    try:
        state = json.loads((data_dir / CATALOG_STATE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _write_state(data_dir: Path, inputs: str, tables: dict[str, list[str]]) -> None:
    """Record what the catalog now in place holds (after it was renamed into place: a state that
    names another file than the catalog there means nothing and the next publish rebuilds)."""
    state = {"inputs": inputs, "catalog": _file_id(warehouse_path(data_dir)), "tables": tables}
    tmp = data_dir / f"{TMP_PREFIX}{CATALOG_STATE}.{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(json.dumps(state, sort_keys=True))
        os.replace(tmp, data_dir / CATALOG_STATE)
    finally:
        tmp.unlink(missing_ok=True)


def _swap_in(data_dir: Path, build) -> dict[str, list[str]]:
    """Write a catalog to a temporary file with ``build(tmp)`` and rename it over the catalog (the
    caller holds the publish lock); returns what ``build`` returns."""
    target = warehouse_path(data_dir)
    tmp = data_dir / f"{TMP_PREFIX}{target.name}.{uuid.uuid4().hex[:8]}"
    try:
        views = build(tmp)
        (data_dir / CATALOG_STATE).unlink(missing_ok=True)
        os.replace(tmp, target)
        fsync_dir(data_dir)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return views


def _rebuild(data_dir: Path) -> None:
    inputs = _catalog_inputs(data_dir)
    views = _swap_in(data_dir, lambda tmp: _build_catalog(tmp, data_dir))
    _write_state(data_dir, inputs, views)


def publish(data_dir: Path) -> Path:
    """Rebuild ``warehouse.duckdb`` as a catalog of views and swap it in atomically."""
    with _publish_lock(data_dir):
        _rebuild(data_dir)
    return warehouse_path(data_dir)


_DEFERRED: list[dict[Path, dict[str, Path]]] = []
"""While a run holds :func:`catalog_refresh_deferred`: the parts written since, by data dir and table."""


@contextlib.contextmanager
def catalog_refresh_deferred() -> Iterator[None]:
    """Within, :func:`publish_part_to_catalog` notes each part instead of refreshing the catalog,
    and the catalog is brought up to date once for all of them on the way out (also when the run
    failed): a fresh day's run added each table's first part to a copy of the catalog, one copy
    per table (~40 ms each, ~1 s of a tiny day's run). For one run's steps in this process: a
    step that reads the catalog (the report) calls :func:`refresh_deferred` first."""
    _DEFERRED.append({})
    try:
        yield
    finally:
        refresh_deferred()
        _DEFERRED.pop()


def refresh_deferred() -> None:
    """Bring the catalogs up to date with the parts noted since :func:`catalog_refresh_deferred`
    (nothing outside one)."""
    if not _DEFERRED:
        return
    noted = _DEFERRED[-1]
    while noted:
        data_dir, parts = noted.popitem()
        refresh_catalog(data_dir, parts=parts)


def publish_part_to_catalog(data_dir: Path, table: str, part: Path) -> str:
    """:func:`refresh_catalog` after ``part`` of ``table`` was written, or, inside
    :func:`catalog_refresh_deferred`, noted for its end (``"deferred"``)."""
    if _DEFERRED:
        _DEFERRED[-1].setdefault(data_dir, {})[table] = part
        return "deferred"
    return refresh_catalog(data_dir, table, part)


def refresh_catalog(data_dir: Path, table: str | None = None, part: Path | None = None, *, parts: dict[str, Path] | None = None) -> str:
    """Bring ``warehouse.duckdb`` up to date after ``part`` of ``table`` was written (or, with no
    part, after a run), doing only what changed: nothing when the catalog already holds every
    derived table present with the part's columns (a derived view reads all its parts, so a new
    part of a known table needs no new catalog); the missing views added to a copy when only new
    tables (or a table's new columns) appeared; a whole rebuild when anything else it holds
    changed (:func:`_catalog_inputs`), a table is gone, or the catalog in place is not the one
    last recorded. The copy or rebuild is renamed into place under the publish lock, so a reader
    sees the old catalog or the new one. ``parts``: several tables' written parts at once, by
    table. Returns ``"kept"``, ``"added"`` or ``"rebuilt"``."""
    target = warehouse_path(data_dir)
    with _publish_lock(data_dir):
        state = _read_state(data_dir)
        inputs = _catalog_inputs(data_dir)
        known = state.get("tables") if state else None
        if (state is None or not isinstance(known, dict) or state.get("inputs") != inputs
                or state.get("catalog") != _file_id(target) or _file_id(target) is None):
            _rebuild(data_dir)
            return "rebuilt"
        present = derived_tables(data_dir)
        if set(known) - set(present):
            _rebuild(data_dir)
            return "rebuilt"
        missing = [t for t in present if t not in known]
        written = dict(parts or {})
        if table is not None and part is not None:
            written[table] = part
        for name, path in written.items():
            if name in known and path.is_file() and pq.read_schema(path).names != known[name]:
                missing.append(name)
        if not missing:
            return "kept"

        def add(tmp: Path) -> dict[str, list[str]]:
            shutil.copyfile(target, tmp)
            return _in_local_folder(tmp, lambda path: _add_to_catalog(path, data_dir, missing))

        views = _swap_in(data_dir, add)
        _write_state(data_dir, inputs, {**known, **views})
        return "added"


def catalog_root(path: Path) -> str | None:
    """The data dir a catalog file was built for; None when it has no ``catalog_info`` (built by
    an older wattline) or is not a DuckDB file. Opened read-only: never writes."""
    try:
        con = duckdb.connect(str(path), read_only=True, config={"autoload_known_extensions": False})
    except duckdb.Error:
        return None
    try:
        return con.execute(f"SELECT data_dir FROM {CATALOG_INFO}").fetchone()[0]
    except duckdb.Error:
        return None
    finally:
        con.close()


def catalog_problem(data_dir: Path) -> str | None:
    """Why ``warehouse.duckdb`` cannot serve ``data_dir`` as it is (None when it can): missing,
    damaged, built by an older wattline, or built for another folder (the data dir was moved
    or copied, so its views read the old place)."""
    path = warehouse_path(data_dir)
    if not path.exists():
        return f"{path} does not exist yet"
    root = catalog_root(path)
    if root is None:
        return f"{path} is not a catalog of this wattline (damaged, or built by an older version)"
    if root != str(data_dir):
        return f"{path} was built for {root} (the data dir was moved or copied)"
    return None


def publish_if_stale(data_dir: Path) -> bool:
    """Rebuild the catalog when one exists but does not serve ``data_dir`` (moved, copied,
    damaged, older): for writers other than ``run`` (which always publishes). Returns whether
    it rebuilt."""
    if warehouse_path(data_dir).exists() and catalog_problem(data_dir):
        publish(data_dir)
        return True
    return False


def remove_stale_tmp(data_dir: Path, older_than_s: float = 3600.0) -> list[Path]:
    """Delete temporary partition and catalog files left by a killed writer; returns them.

    Only old ones: a live writer (a run launched from the UI) may be writing one right now.
    They are harmless meanwhile (no glob of a view matches them), only disk space."""
    cutoff = time.time() - older_than_s
    candidates = [*data_dir.glob(f"{TMP_PREFIX}*"), *(data_dir / DERIVED_DIR).rglob(f"{TMP_PREFIX}*")]
    removed = []
    for path in candidates:
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
    return removed


def has_data(data_dir: Path) -> bool:
    return any(raw_files(data_dir, name) for name in DATASETS)


def reader_dir(value, date: str | None = None) -> Path:
    """The local dir readers (``wattline sql / report / ui``) work on: the data dir itself, or for
    S3 its mirror (pipeline/remote.py) with the catalog rebuilt when the mirror changed."""
    work, stale = remote.mirror_for_readers(value, date)
    if stale and (derived_tables(work) or has_data(work)):
        publish(work)
    return work
