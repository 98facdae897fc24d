"""Read-only access to the warehouse for ad-hoc SQL: one statement, SELECT-like, no host files.

Three locks: the file is opened ``read_only`` (no writes to the catalog); only SELECT and
EXPLAIN of a SELECT pass (no COPY, ATTACH, INSTALL/LOAD, SET, PRAGMA...: EXPLAIN ANALYZE runs
what it explains, and allowed_directories lets DuckDB write inside the data dir); and external access
is limited to the data dir and then the configuration is locked, so ``read_csv('/etc/passwd')``
or a view that points elsewhere is refused by DuckDB itself.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from collectors.inventory import InventoryError
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
    if kind == duckdb.StatementType.EXPLAIN:
        kinds = [_kind(inner) for inner in _explained(statements[0].query)]
        if duckdb.StatementType.SELECT not in kinds:
            # EXPLAIN ANALYZE runs its statement: `EXPLAIN ANALYZE COPY ... TO '<data-dir>/x'` would write.
            name = next((k.name for k in kinds if k), "this")
            raise ReadOnlyError(f"read-only: EXPLAIN of a {name} statement is refused (only EXPLAIN [ANALYZE] SELECT ...)")
    return sql


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
    text = [query[pos:end].strip() for (pos, _), end in zip(tokens, ends)]
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


def _publish(data_dir: Path) -> None:
    """(Re)build the catalog; a broken inventory.yaml is the user's to fix: one line."""
    try:
        warehouse.publish(data_dir)
    except InventoryError as exc:
        raise ReadOnlyError(" ".join(str(exc).split())) from None


def _require_data(data_dir: Path) -> None:
    if not warehouse.has_data(data_dir) and not warehouse.derived_tables(data_dir):
        raise ReadOnlyError(f"data dir {data_dir} has no Parquet data yet (run `wattline simulate`, `collect` or `ingest`)")


def ensure_warehouse(data_dir: Path) -> Path:
    """The warehouse file, built first if the data dir has Parquet but no warehouse yet."""
    if not data_dir.is_dir():
        raise ReadOnlyError(f"data dir {data_dir} does not exist (run `wattline simulate` or pass --data-dir)")
    path = warehouse_path(data_dir)
    if not path.exists():
        _require_data(data_dir)
        _publish(data_dir)
    return path


def connect_readonly(data_dir: Path, retries_s: float = 10.0) -> duckdb.DuckDBPyConnection:
    """Open the catalog read-only; wait out a lock (someone's read-write DuckDB CLI), rebuild a
    damaged catalog once (it holds only views and inventory tables), else one clear error."""
    path = ensure_warehouse(data_dir)
    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    # The pipeline's bound (memory_limit, threads), so an ad-hoc query spills or fails instead of
    # taking DuckDB's default of 80 % of RAM; insertion order is kept for the user.
    config.update({k: v for k, v in warehouse.duckdb_config().items() if k in ("memory_limit", "threads")})
    deadline = time.monotonic() + retries_s
    rebuilt = False
    while True:
        try:
            con = duckdb.connect(str(path), read_only=True, config=config)
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET allowed_directories = ?", [[str(data_dir) + "/"]])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            return con
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower() and time.monotonic() < deadline:
                time.sleep(0.2)
            elif not rebuilt and "not a valid DuckDB database file" in str(exc):
                _publish(data_dir)
                rebuilt = True
            else:
                raise ReadOnlyError(f"cannot open {path}: {_first_line(exc)}") from None


class QueryInterrupted(ReadOnlyError):
    """The user pressed Ctrl-C (SIGINT) during the query; it was stopped."""


DEFAULT_TIMEOUT_S = 60.0


def execute(con: duckdb.DuckDBPyConnection, sql: str, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> pa.Table:
    """Run ``sql`` on ``con`` in a worker thread while this thread watches the clock and Ctrl-C:
    past ``timeout_s``, or on SIGINT (a handler while the query runs, when this is the main
    thread), it calls ``con.interrupt()``, DuckDB stops the query at its next check, and one
    clear error comes back instead of a query that runs until killed or a traceback."""
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
    previous = signal.signal(signal.SIGINT, lambda *_: stop("interrupt")) if in_main else None
    try:
        started = time.monotonic()
        threading.Thread(target=work, name="wattline-sql", daemon=True).start()
        while not done.wait(0.05):
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                stop("timeout")
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    if stopped_by == ["interrupt"]:
        raise QueryInterrupted("interrupted (Ctrl-C): the query was stopped")
    if stopped_by == ["timeout"]:
        raise ReadOnlyError(f"query exceeded {timeout_s:g} s and was stopped (--timeout SECONDS to allow more)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["table"]


def run_query(data_dir: Path, sql: str, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> pa.Table:
    """Execute one read-only statement and return its result as an Arrow table, stopped past
    ``timeout_s`` seconds or on Ctrl-C (:func:`execute`).

    A catalog whose views point at files deleted since it was built ("No files found") is
    rebuilt once and the query retried, so deleting a dataset does not break every query."""
    check_statement(sql)
    for attempt in (1, 2):
        con = connect_readonly(data_dir)
        try:
            return execute(con, sql, timeout_s)
        except duckdb.IOException as exc:
            if attempt == 2 or "No files found that match the pattern" not in str(exc):
                raise ReadOnlyError(_first_line(exc)) from None
        except duckdb.Error as exc:
            raise ReadOnlyError(_first_line(exc)) from None
        finally:
            con.close()
        _require_data(data_dir)
        _publish(data_dir)


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
