"""Read-only access to the warehouse for ad-hoc SQL: one statement, SELECT-like, no host files.

Three locks: the file is opened ``read_only`` (no writes to the catalog; nothing else is
written either: a missing, damaged or moved catalog is replaced by views built in memory, see
:func:`open_catalog`); only SELECT and
EXPLAIN of a SELECT pass (no COPY, ATTACH, INSTALL/LOAD, SET, PRAGMA...: EXPLAIN ANALYZE runs
what it explains, and allowed_directories lets DuckDB write inside the data dir); and external access
is limited to the data dir and then the configuration is locked, so ``read_csv('/etc/passwd')``
or a view that points elsewhere is refused by DuckDB itself.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from collectors.inventory import InventoryError
from pipeline import warehouse
from pipeline.constants import warehouse_path
from pipeline.sqltext import glob_escape, literal

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
    if kind == duckdb.StatementType.EXPLAIN:
        kinds = [_kind(inner) for inner in _explained(statements[0].query)]
        if duckdb.StatementType.SELECT not in kinds:
            # EXPLAIN ANALYZE runs its statement: `EXPLAIN ANALYZE COPY ... TO '<data-dir>/x'` would write.
            name = next((k.name for k in kinds if k), "this")
            raise ReadOnlyError(f"read-only: EXPLAIN of a {name} statement is refused (only EXPLAIN [ANALYZE] SELECT ...)")
    return sql


_DESCRIBE = re.compile(r"^\s*(?:DESCRIBE|DESC)\s+([A-Za-z_][A-Za-z0-9_]*)\s*;?\s*$", re.I)


def with_meanings(sql: str) -> str:
    """``DESCRIBE <table>`` with a ``meaning`` column: the comment the catalog holds for each
    column (pipeline/columns.py); DuckDB's own DESCRIBE does not show comments. Anything else
    is returned as it is."""
    match = _DESCRIBE.match(sql)
    if not match:
        return sql
    name = match.group(1)
    return (
        f"SELECT d.*, c.comment AS meaning FROM (DESCRIBE {name}) d LEFT JOIN (SELECT column_name, comment, column_index "
        f"FROM duckdb_columns() WHERE lower(table_name) = {literal(name.lower())} AND database_name = current_database() "
        "AND schema_name = current_schema()) c USING (column_name) ORDER BY c.column_index"
    )


def _kind(sql: str):
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return None
    return statements[0].type if len(statements) == 1 else None


def _explained(query: str) -> list[str]:
    """Candidates for the statement under ``EXPLAIN [ANALYZE] [(options)]``, found with DuckDB's
    tokenizer: the text after the options group, and (for ``EXPLAIN (SELECT ...)``) without it."""
    tokens = [(pos, kind) for pos, kind in duckdb.tokenize(query) if kind != duckdb.token_type.comment]
    ends = [pos for pos, _ in tokens[1:]] + [len(query)]
    text = [query[pos:end].strip() for (pos, _), end in zip(tokens, ends, strict=False)]
    i = 1  # tokens[0] is EXPLAIN
    if i < len(text) and text[i].upper() in ("ANALYZE", "ANALYSE"):
        i += 1
    candidates = [query[tokens[i][0]:]] if i < len(tokens) else []
    if i < len(text) and text[i] == "(":
        while i < len(text) and text[i] != ")":
            i += 1
        if i + 1 < len(tokens):
            candidates.append(query[tokens[i + 1][0]:])
    return candidates


def _require_data(data_dir: Path) -> None:
    if not warehouse.has_data(data_dir) and not warehouse.derived_tables(data_dir):
        raise ReadOnlyError(f"data dir {data_dir} has no Parquet data yet (run `wattline simulate`, `collect` or `ingest`)")


_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def _config() -> dict:
    """No extension installs, and the pipeline's bound (memory_limit, threads), so an ad-hoc query
    spills or fails instead of taking DuckDB's default of 80 % of RAM."""
    config = dict(_CONFIG)
    config.update({k: v for k, v in warehouse.duckdb_config(*_limits).items() if k in ("memory_limit", "threads")})
    return config


_limits: tuple[str | None, int | None] = (None, None)
"""DuckDB's memory_limit and threads for this process's read-only connections, as its entry point
resolved them (:func:`set_limits`); None: the defaults (warehouse.duckdb_config)."""


def set_limits(memory: str | None, threads: int | None = None) -> None:
    """Connections opened after this use ``memory`` (a DuckDB size, e.g. "1536MiB") as DuckDB's
    memory_limit and ``threads`` threads: `wattline sql` passes the settings' (or --memory-limit's),
    a report the run's."""
    global _limits
    _limits = (memory, threads)


def _memory_catalog(data_dir: Path) -> duckdb.DuckDBPyConnection:
    """The catalog's views and inventory tables built in an in-memory DuckDB: nothing written."""
    _require_data(data_dir)
    con = duckdb.connect(":memory:", config=_config())
    try:
        con.execute("SET TimeZone = 'UTC'")
        warehouse.create_views(con, data_dir)
    except InventoryError as exc:  # a broken inventory.yaml is the user's to fix: one line
        con.close()
        raise ReadOnlyError(" ".join(str(exc).split())) from None
    except BaseException:
        con.close()
        raise
    return con


def _open_file(data_dir: Path, retries_s: float) -> duckdb.DuckDBPyConnection | None:
    """``warehouse.duckdb`` opened read-only if it is a catalog built for ``data_dir``; None when
    it is missing, damaged, older or built for another folder. Waits out a lock (someone's
    read-write DuckDB CLI), else one clear error."""
    path = warehouse_path(data_dir)
    deadline = time.monotonic() + retries_s
    while path.exists():
        try:
            con = duckdb.connect(str(path), read_only=True, config=_config())
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower() and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if "not a valid DuckDB database file" in str(exc):
                return None
            raise ReadOnlyError(f"cannot open {path}: {_first_line(exc)}") from None
        except duckdb.Error:
            return None
        try:
            root = con.execute(f"SELECT data_dir FROM {warehouse.CATALOG_INFO}").fetchone()[0]
        except duckdb.Error:
            root = None
        if root == str(data_dir):
            return con
        con.close()
        return None
    return None


def open_catalog(data_dir: Path, retries_s: float = 10.0) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """A locked-down read-only connection to the catalog, and why it is not the file (None when
    it is).

    ``wattline sql`` and the reports never write: when ``warehouse.duckdb`` is missing, damaged,
    built by an older wattline or built for another folder (the data dir was moved or copied:
    its views would read the old place, or fail on it), the same views are built in an
    in-memory DuckDB for this one connection (as long as a ``publish``: binding each view reads
    one Parquet footer per table; 0.4-1 s for a simulated day on a loaded 2-core machine) and the file
    is left for the next writer (``run``, ``simulate``, ``import``, ``ingest``) to rebuild. A
    reader that rewrote it would race the writers that own it and fail on a read-only copy.
    """
    if not data_dir.is_dir():
        raise ReadOnlyError(f"data dir {data_dir} does not exist (run `wattline simulate` or pass --data-dir)")
    con = _open_file(data_dir, retries_s)
    problem = None
    if con is None:
        problem = warehouse.catalog_problem(data_dir) or f"{warehouse_path(data_dir)} changed while being read"
        con = _memory_catalog(data_dir)
    try:
        _lock_down(con, data_dir)
    except BaseException:
        con.close()
        raise
    return con, problem


def _lock_down(con: duckdb.DuckDBPyConnection, data_dir: Path) -> None:
    """Files only under the data dir, then no more SET (the module docstring's third lock)."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET allowed_directories = ?", [_allowed_directories(data_dir)])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _allowed_directories(data_dir: Path) -> list[str]:
    """The data dir, as written and as the glob-escaped prefix the views' patterns start with
    (DuckDB checks the pattern's text; the escaped form matches only the data dir itself)."""
    return sorted({str(data_dir) + "/", glob_escape(data_dir) + "/"})


def connect_readonly(data_dir: Path, retries_s: float = 10.0) -> duckdb.DuckDBPyConnection:
    """:func:`open_catalog`'s connection."""
    return open_catalog(data_dir, retries_s)[0]


class QueryInterrupted(ReadOnlyError):
    """The user pressed Ctrl-C (SIGINT) during the query; it was stopped."""


class QueryOutOfMemory(ReadOnlyError):
    """An allocation failed: over DuckDB's memory_limit, or over the process's address-space limit."""


DEFAULT_TIMEOUT_S = 60.0


def execute(con: duckdb.DuckDBPyConnection, sql: str, timeout_s: float | None = DEFAULT_TIMEOUT_S,
            stop_signal: int = signal.SIGINT, on_start=None) -> pa.Table:
    """Run ``sql`` on ``con`` in a worker thread while this thread watches the clock and Ctrl-C:
    past ``timeout_s``, or on ``stop_signal`` (a handler while the query runs, when this is the
    main thread; SIGINT is what Ctrl-C sends), it calls ``con.interrupt()``, DuckDB stops the
    query at its next check, and one clear error comes back instead of a query that runs until
    killed or a traceback. ``on_start()`` is called just before the query starts."""
    outcome: dict = {}
    done = threading.Event()
    stopped_by: list[str] = []

    def work() -> None:
        try:
            outcome["table"] = con.sql(sql).to_arrow_table()
        except BaseException as exc:  # handed to the watching thread
            outcome["error"] = exc
        finally:
            done.set()

    def stop(reason: str) -> None:
        if not stopped_by:
            stopped_by.append(reason)
            con.interrupt()

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(stop_signal, lambda *_: stop("interrupt")) if in_main else None
    try:
        if on_start is not None:
            on_start()
        started = time.monotonic()
        threading.Thread(target=work, name="wattline-sql", daemon=True).start()
        while not done.wait(0.05):
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                stop("timeout")
    finally:
        if in_main:
            signal.signal(stop_signal, previous)
    if stopped_by == ["interrupt"]:
        raise QueryInterrupted("interrupted (Ctrl-C): the query was stopped")
    if stopped_by == ["timeout"]:
        raise ReadOnlyError(f"query exceeded {timeout_s:g} s and was stopped (--timeout SECONDS to allow more)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["table"]


def run_query(data_dir: Path, sql: str, timeout_s: float | None = DEFAULT_TIMEOUT_S,
              notes: list[str] | None = None, **execute_options) -> pa.Table:
    """Execute one read-only statement and return its result as an Arrow table, stopped past
    ``timeout_s`` seconds or on Ctrl-C (:func:`execute`).

    A catalog whose views point at files deleted since it was built ("No files found") is not
    rewritten: the query is retried once on views built in memory, where a dataset without
    files is typed and empty. ``notes`` collects why the catalog file was not used;
    ``execute_options`` go to :func:`execute` (``stop_signal``, ``on_start``)."""
    check_statement(sql)
    sql = with_meanings(sql)
    con, problem = open_catalog(data_dir)
    if problem and notes is not None:
        notes.append(problem)
    try:
        return execute(con, sql, timeout_s, **execute_options)
    except duckdb.IOException as exc:
        if "No files found that match the pattern" not in str(exc):
            raise ReadOnlyError(_first_line(exc)) from None
    except (duckdb.OutOfMemoryException, MemoryError) as exc:
        raise QueryOutOfMemory(str(exc).strip().splitlines()[0]) from None
    except duckdb.Error as exc:
        raise ReadOnlyError(_first_line(exc)) from None
    finally:
        con.close()
    con = _memory_catalog(data_dir)
    try:
        _lock_down(con, data_dir)
        return execute(con, sql, timeout_s, **execute_options)
    except (duckdb.OutOfMemoryException, MemoryError) as exc:
        raise QueryOutOfMemory(str(exc).strip().splitlines()[0]) from None
    except duckdb.Error as exc:
        raise ReadOnlyError(_first_line(exc)) from None
    finally:
        con.close()


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
