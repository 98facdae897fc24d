"""One shape for every derived table: a :class:`Table` declaration and the SQL files beside it.

A table is its folder ``sql/<table>/``:

- ``<table>.sql``: the query (preparatory statements first, the last one's rows are the partition);
- ``rollup.sql`` (optional): the fleet-day query of a table whose cluster-days hold only their own
  hosts and clusters (``Table(rollup=True)`` without it runs ``<table>.sql`` on the fleet-day);
- ``checks/<name>.sql``: one data test each, returning the *violating* rows (none: passed), with
  its severity and description in a header comment (:func:`parse_check`);
- ``headline.sql`` (optional): one row whose columns become the materialization's metadata
  (a MAP or STRUCT column shows as JSON).

Every file runs as-is in the DuckDB CLI on the warehouse after
``SET VARIABLE partition_date = DATE '2026-11-30'``. The declaration (:class:`Table`, in the
domain module of ``pipeline/assets/``) adds what SQL cannot say: partitioning, upstream tables,
Dagster config, and the checks that need numpy. :func:`table_assets` turns it into the Dagster
asset (and its ``fleet/`` rollup asset) with one check spec per check file.

A table's one implementation is one of three:

- its SQL file (most tables);
- a per-GPU series function run by the series engine (``series=True``, pipeline/series/);
- a Python function of the partition's relations (``rows=``, :class:`TableRun`): for what SQL
  says badly (numpy kernels over whole series, seeded draws). It returns the part's rows as
  Arrow; it has no ``<table>.sql``, and its checks, headline and column docs are files as above.
"""

# No `from __future__ import annotations`: Dagster reads the asset functions' annotations
# (the config class is a closure variable) when the asset is defined.
import contextlib
import datetime as dt
import decimal
import functools
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    Config,
    MaterializeResult,
    MetadataValue,
    PartitionsDefinition,
    PreviewWarning,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from pipeline import process_memory, series_run, sqlfiles
from pipeline.asset_docs import asset_docs
from pipeline.constants import SQL_DIR
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope

Connection = duckdb.DuckDBPyConnection
Partitioning = Literal["cluster-day", "fleet-day"]
ROLLUP_PREFIX = "fleet"
ROLLUP_GROUP = "fleet"
_HEADER = re.compile(r"^--\s*(severity|description|failure|rollup|blocking)\s*:\s*(.*?)\s*$", re.M)
EXAMPLE_ROWS = 5
"""Violating rows a failed check shows (as a table with the check query's column names)."""


@dataclass(frozen=True)
class PythonCheck:
    """A check SQL cannot express (numpy, files the quarantine knows): a named hook."""

    name: str
    description: str
    run: Callable[..., AssetCheckResult]
    rollup: bool = True
    blocking: bool = False
    """Whether its ERROR stops the run's downstream assets (a check naming input set aside, whose
    table is sound for what remains, is not)."""


@dataclass(frozen=True)
class SqlCheck:
    """``sql/<table>/checks/<name>.sql``: violating rows; severity etc. from its header comment."""

    name: str
    sql: str
    severity: AssetCheckSeverity
    description: str
    failure: str
    """The failed check's description; ``{n}``: the number of violating rows, ``{list}``: the first
    column of the first four, comma-separated."""
    rollup: bool = True
    """Whether the check also runs on the table's fleet-day rollup (header ``-- rollup: no``)."""
    blocking: bool = True
    """An ERROR that fails stops the run's downstream assets (the numbers are wrong: nothing should be
    built on them); header ``-- blocking: no`` for an ERROR whose table is still sound for what remains."""

    def run(self, con: Connection, **_: Any) -> AssetCheckResult:
        cursor = con.execute(self.sql)
        rows = cursor.fetchall()
        return AssetCheckResult(
            check_name=self.name,
            passed=not rows,
            severity=self.severity,
            metadata={"violations": len(rows), "examples": examples_table(cursor.description, rows[:EXAMPLE_ROWS])},
            description=self.failure.format(n=len(rows), list=", ".join(str(r[0]) for r in rows[:4])) if rows else None,
        )


AnyCheck = SqlCheck | PythonCheck


def _cell(value: Any) -> str | int | float | bool | None:
    value = _plain(value)
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def examples_table(description: Sequence[Any], rows: Sequence[Sequence[Any]]) -> MetadataValue:
    """Violating rows as a table in the UI: the query's column names (and DuckDB types) as labels."""
    columns = [(str(d[0]), str(d[1])) for d in description]
    schema = TableSchema(columns=[TableColumn(name, type=kind) for name, kind in columns])
    records = [TableRecord({name: _cell(v) for (name, _), v in zip(columns, row, strict=True)}) for row in rows]
    return MetadataValue.table(records=records, schema=schema)


def files_table(files: Mapping[str, str], what: str) -> MetadataValue:
    """Files named by a check (at most ten) and why, as a table: columns ``file`` and ``what``."""
    return examples_table([("file", "VARCHAR"), (what, "VARCHAR")], list(files.items())[:10])


def parse_check(path: Path) -> SqlCheck:
    """A check file: ``-- severity: ERROR|WARN``, ``-- description: ...`` (what must hold),
    optional ``-- failure: ...`` (said when it fails: ``{n}`` = violating rows, ``{list}`` = the
    first column of the first four) and
    ``-- rollup: no``, ``-- blocking: no`` (an ERROR that does not stop downstream assets);
    the rest is the query."""
    text = path.read_text()
    header = {k: v for k, v in _HEADER.findall(text)}
    missing = {"severity", "description"} - set(header)
    if missing:
        raise ValueError(f"{path}: header lacks {', '.join(sorted(missing))}")
    return SqlCheck(
        name=path.stem,
        sql=text.strip().rstrip(";"),
        severity=AssetCheckSeverity[header["severity"].upper()],
        description=header["description"],
        failure=header.get("failure") or f"{{n}} violating row(s): {header['description']}",
        rollup=header.get("rollup", "yes").lower() not in ("no", "false"),
        blocking=header.get("blocking", "yes").lower() not in ("no", "false"),
    )


def table_dir(name: str) -> Path:
    return SQL_DIR / name


@functools.cache
def sql_checks(name: str) -> tuple[SqlCheck, ...]:
    return tuple(parse_check(p) for p in sorted((table_dir(name) / "checks").glob("*.sql")))


@functools.cache
def headline_sql(name: str) -> str | None:
    path = table_dir(name) / "headline.sql"
    return path.read_text().strip().rstrip(";") if path.exists() else None


def _plain(value: Any) -> Any:
    """A DuckDB value as JSON takes it: DECIMAL as float, dates as ISO text, nested values likewise."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    return value


def headline(con: Connection, name: str) -> dict:
    """``sql/<table>/headline.sql``'s one row as metadata (MAP/STRUCT/LIST columns as JSON)."""
    sql = headline_sql(name)
    if sql is None:
        return {}
    cursor = con.execute(sql)
    row = cursor.fetchone()
    if row is None:
        return {}
    out: dict = {}
    for (column, *_), raw in zip(cursor.description, row, strict=True):
        value = _plain(raw)
        if isinstance(value, (dict, list)):
            out[column] = MetadataValue.json(value)
        elif value is None:
            out[column] = MetadataValue.null()
        else:
            out[column] = value
    return out


@dataclass(frozen=True)
class TableRun:
    """What a Python table's ``rows`` function gets beside the connection: the run's settings, as values."""

    scope: Scope
    """The cluster-day (or fleet-day) being written."""
    rollup: bool
    """The ``fleet/`` rollup asset's step: the cluster-days' parts are the input."""
    grid_step_ms: int
    """The grid_step_ms setting."""
    found: dict[str, Any] = field(default_factory=dict)
    """What the function learnt beside the rows that the table's python checks and headline need
    (e.g. per-GPU facts no column holds), filled by the time its rows are written: passed to them
    as keyword arguments."""


Rows = Callable[[Connection, TableRun], "pa.Table | pa.RecordBatchReader"]
"""A Python table's implementation: the part's rows, as an Arrow table or a stream of record
batches (written as they come, so a stream bounds the step's memory)."""


@dataclass(frozen=True)
class Table:
    """A derived table, declared once. See the module docstring for its files."""

    name: str
    doc: str
    partitions: Partitioning
    deps: Sequence[Any] = ()
    """Upstream assets (names, keys or asset definitions): what the SQL reads."""
    group: str = "power"
    rollup: bool = False
    """Also a ``fleet/<name>`` asset: the fleet-day part, from ``rollup.sql`` (else ``<name>.sql``)."""
    rollup_deps: Sequence[Any] = ()
    config: type[Config] | None = None
    """Dagster run config of the table; ``variables`` maps it and the resource (the run's settings)
    to the DuckDB variables the SQL reads."""
    variables: Callable[[Any, WarehouseResource], Mapping[str, float | str]] | None = None
    grid_step: bool = False
    """The table's SQL reads the ``grid_step_ms`` setting: its connection holds the resource's value as
    the DuckDB variable ``grid_step_ms`` (a Python table gets it as ``TableRun.grid_step_ms``)."""
    rows: Rows | None = None
    """A Python table (module docstring): its one implementation. The fleet-day rollup runs it too
    (``TableRun.rollup``) unless the folder has ``rollup.sql``."""
    one_thread: bool = False
    """The part's query runs on one DuckDB thread (:func:`one_thread`): where each thread's own hash
    table holds every slot of the day (input sorted by GPU), a second thread doubles the step's
    memory and does not save CPU."""
    series: bool = False
    """A per-GPU series table (pipeline/series/): its rows come from the series engine, its
    function and schema registered there, not from a SQL file; its checks and headline are SQL
    files as for any table."""
    python_checks: Sequence[PythonCheck] = ()
    python_headline: Callable[..., dict] | None = None
    """Metadata SQL cannot give (added to headline.sql's); called with the connection and ``inputs`` (with a
    Python table's ``TableRun.found``, as its python checks are)."""
    inputs: Callable[[AssetExecutionContext, WarehouseResource, Scope], dict] | None = None
    """Run after the write: keyword arguments for the python checks and headline that only the
    resource knows (e.g. the quarantine's rejected files, which it may also log)."""

    @property
    def key(self) -> AssetKey:
        return AssetKey(self.name)

    @property
    def rollup_key(self) -> AssetKey:
        return AssetKey([ROLLUP_PREFIX, self.name])

    def sql_name(self, rollup: bool = False) -> str:
        """The SQL file (``sqlfiles.query`` name) of the table or of its rollup."""
        if rollup and (table_dir(self.name) / "rollup.sql").exists():
            return f"{self.name}/rollup"
        if (table_dir(self.name) / f"{self.name}.sql").exists():
            return f"{self.name}/{self.name}"
        return self.name

    def checks(self, rollup: bool = False) -> list[AnyCheck]:
        found: list[AnyCheck] = [*sql_checks(self.name), *self.python_checks]
        return [c for c in found if c.rollup or not rollup]

    def compute(self, context: AssetExecutionContext, warehouse: WarehouseResource, config: Config | None, rollup: bool) -> MaterializeResult:
        """Write the partition for the context's cluster-day or fleet-day, check it, describe it."""
        scope = Scope.of(context)
        process_memory.return_freed_memory()
        process_memory.reset_peak()
        with warehouse.connection(scope, share=context.run.run_id) as con:
            variables = dict(self.variables(config, warehouse) if self.variables and config is not None else {})
            if self.grid_step:
                variables["grid_step_ms"] = warehouse.grid_step_ms
            for name, value in variables.items():
                con.execute(f"SET VARIABLE {name} = ?", [value])
            found: dict[str, Any] = {}

            def write(sql: str) -> int:
                return warehouse.write_and_publish(con, self.name, scope, sql)

            if self.series and not rollup:
                rows = series_run.series_part(context, warehouse, con, scope, self.name)
            elif self.rows is not None and not (rollup and self.sql_name(rollup).endswith("/rollup")):
                run = TableRun(scope=scope, rollup=rollup, grid_step_ms=warehouse.grid_step_ms)
                rows = self._write_rows(con, run, lambda stream: warehouse.write_rows_and_publish(con, self.name, scope, stream))
                found = run.found
            else:
                prepare, query = statements(self.sql_name(rollup))
                for statement in prepare:
                    con.execute(statement)
                with one_thread(con) if self.one_thread else contextlib.nullcontext():
                    rows = write(query)
            inputs = {**found, **(self.inputs(context, warehouse, scope) if self.inputs and not rollup else {})}
            results = [c.run(con, **inputs) for c in self.checks(rollup)]
            metadata = headline(con, self.name)
            if self.python_headline is not None and not rollup:
                metadata.update(self.python_headline(con, **inputs))
        metadata.update({"rows": rows, "dagster/row_count": rows})
        peak = process_memory.peak_mb()
        if peak is not None:  # the process's peak RSS while this step ran: which asset sets a run's peak
            metadata["peak_rss_mb"] = round(peak, 1)
        return MaterializeResult(metadata=metadata, check_results=results)


    def _write_rows(self, con: Connection, run: TableRun, write: Callable[[Callable[[], pa.RecordBatchReader]], int]) -> int:
        """The part of a Python table: ``write`` (resource.write_rows_and_publish) is handed a
        function that computes the rows afresh as a stream each time it is called (a retry after
        a quarantine reads them again)."""
        rows = self.rows
        assert rows is not None

        def stream() -> pa.RecordBatchReader:
            got = rows(con, run)
            return got if isinstance(got, pa.RecordBatchReader) else pa.RecordBatchReader.from_batches(got.schema, got.to_batches())

        kept = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
        con.execute("SET preserve_insertion_order = true")  # rows cut to the scope by DuckDB stay in the rows' order
        try:
            # the rows' own queries on one DuckDB thread, as they ran while DuckDB's COPY wrote the
            # part (one generator feeds the write either way: a second thread held its own batches)
            with one_thread(con):
                return write(stream)
        finally:
            con.execute(f"SET preserve_insertion_order = {'true' if kept else 'false'}")


@contextlib.contextmanager
def one_thread(con: Connection) -> Iterator[None]:
    """The block's statements on one DuckDB thread: ``threads`` is the database's setting (not the
    connection's), put back after; the run's other steps never share a database with this one at
    the same time (warehouse.shared_compute_connection)."""
    threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("SET threads = 1")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(threads)}")


def statements(name: str) -> tuple[list[str], str]:
    """A SQL file split into its preparatory statements (temp tables the query reads several
    times) and the final query, so the file still runs as-is in the DuckDB CLI."""
    parts = sqlfiles.split(sqlfiles.query(name))
    return parts[:-1], parts[-1]


def _blocking(check: AnyCheck) -> bool:
    """Only an ERROR check blocks (a WARN never stops anything)."""
    return check.blocking and (not isinstance(check, SqlCheck) or check.severity == AssetCheckSeverity.ERROR)


def _specs(table: Table, key: AssetKey, rollup: bool, partitions_def: PartitionsDefinition) -> list[AssetCheckSpec]:
    """One spec per check, partitioned like its asset: each result belongs to its cluster-day or
    fleet-day, so the UI shows a day × cluster's own result, not whichever partition ran last."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)  # partitioned check specs are a Dagster preview
        return [
            AssetCheckSpec(name=c.name, asset=key, description=c.description, blocking=_blocking(c), partitions_def=partitions_def)
            for c in table.checks(rollup)
        ]


def _dep(dep: Any) -> Any:
    """A dependency as Dagster takes it; ``["fleet", "t"]`` is the key of ``t``'s rollup."""
    return AssetKey(list(dep)) if isinstance(dep, (list, tuple)) else dep


def _asset(table: Table, rollup: bool) -> AssetsDefinition:
    fleet_day = rollup or table.partitions == "fleet-day"
    partitions_def = daily_partitions if fleet_day else day_cluster_partitions
    kwargs: dict[str, Any] = dict(
        name=table.name,
        partitions_def=partitions_def,
        deps=[_dep(d) for d in (table.rollup_deps if rollup else table.deps)],
        group_name=ROLLUP_GROUP if rollup else table.group,
        kinds={"duckdb", "parquet"},
        check_specs=_specs(table, table.rollup_key if rollup else table.key, rollup, partitions_def),
        description=table.doc,
    )
    if rollup:
        kwargs["key_prefix"] = [ROLLUP_PREFIX]
    kwargs.update(asset_docs(table.name, table.doc, ROLLUP_PREFIX if rollup else None))
    if table.config is not None and not rollup:
        config_type = table.config

        @asset(**kwargs)
        def _configured(context: AssetExecutionContext, warehouse: WarehouseResource, config: config_type):  # type: ignore[valid-type]
            return table.compute(context, warehouse, config, rollup)

        return _configured

    @asset(**kwargs)
    def _plain(context: AssetExecutionContext, warehouse: WarehouseResource):
        return table.compute(context, warehouse, None, rollup)

    return _plain


def table_assets(table: Table) -> tuple[AssetsDefinition, ...]:
    """The table's asset, and its ``fleet/`` rollup asset when it has one."""
    return (_asset(table, False), _asset(table, True)) if table.rollup else (_asset(table, False),)
