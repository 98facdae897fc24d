"""Read-only access to the warehouse for ad-hoc SQL: one statement, SELECT-like, no host files.

Three locks: the file is opened ``read_only`` (no writes to the catalog); only SELECT and
EXPLAIN statements pass (no COPY, ATTACH, INSTALL/LOAD, SET, PRAGMA...); and external access
is limited to the data dir and then the configuration is locked, so ``read_csv('/etc/passwd')``
or a view that points elsewhere is refused by DuckDB itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from pipeline import warehouse
from pipeline.constants import warehouse_path

ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class ReadOnlyError(ValueError):
    """The query was refused or failed; the message is meant for the user."""


def check_statement(sql: str) -> str:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ReadOnlyError(str(exc).splitlines()[0]) from None
    if len(statements) != 1:
        raise ReadOnlyError(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind not in ALLOWED_STATEMENTS:
        raise ReadOnlyError(f"read-only: {kind.name} statements are refused (only SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)")
    return sql


def ensure_warehouse(data_dir: Path) -> Path:
    """The warehouse file, built first if the data dir has Parquet but no warehouse yet."""
    if not data_dir.is_dir():
        raise ReadOnlyError(f"data dir {data_dir} does not exist (run `wattline simulate` or pass --data-dir)")
    path = warehouse_path(data_dir)
    if not path.exists():
        if not warehouse.has_data(data_dir) and not warehouse.derived_tables(data_dir):
            raise ReadOnlyError(f"data dir {data_dir} has no Parquet data yet (run `wattline simulate`, `collect` or `ingest`)")
        warehouse.publish(data_dir)
    return path


def connect_readonly(data_dir: Path, retries_s: float = 10.0) -> duckdb.DuckDBPyConnection:
    path = ensure_warehouse(data_dir)
    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    deadline = time.monotonic() + retries_s
    while True:
        try:
            con = duckdb.connect(str(path), read_only=True, config=config)
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET allowed_directories = ?", [[str(data_dir) + "/"]])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            return con
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_query(data_dir: Path, sql: str) -> duckdb.DuckDBPyRelation:
    """Execute one read-only statement and return its result as an Arrow table."""
    check_statement(sql)
    con = connect_readonly(data_dir)
    try:
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise ReadOnlyError(_first_line(exc)) from None
    finally:
        con.close()


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
