"""`wattline sql "QUERY"`: read-only ad-hoc SQL on the warehouse, in a worker process under a
memory bound and a timeout (pipeline/sqlworker.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from collectors.printable import printable
from collectors.settings import load
from pipeline.cli.common import Interrupted, UserError, data_dir_option
from pipeline.constants import warehouse_path
from pipeline.readonly import DEFAULT_TIMEOUT_S, ReadOnlyError, check_statement
from pipeline.sqlout import FORMATS
from pipeline.warehouse import reader_dir


def _memory_bound(ctx, param, value: str | None) -> int | None:
    """Bytes, or None: the default (DuckDB's bound as the pipeline sets it, plus the headroom)."""
    from pipeline import sqlworker

    if value is None:
        return None
    try:
        bound = sqlworker.parse_size(value)
    except ValueError as exc:
        raise UserError(f"--memory-limit: {exc}") from None
    if bound < 256 * 2**20:
        raise UserError(f"--memory-limit {value!r} is below the 256 MiB a query process needs")
    return bound


@click.command("sql")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here instead of stdout.")
@click.option("--max-rows", type=click.IntRange(min=0), default=50, show_default=True, help="Rows shown by --format table.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT_S,
              show_default=True, metavar="SECONDS", help="Stop the query after this many seconds (exit 2).")
@click.option("--memory-limit", "bound_bytes", metavar="SIZE", default=None, callback=_memory_bound,
              show_default="DuckDB's bound + 512 MiB",
              help="Stop the query when the command's processes hold more than this (e.g. 4GiB, 1500MB, "
                   "800 = MiB; exit 2); DuckDB's own memory_limit is then this less 512 MiB (at most half).")
@data_dir_option(access="read")
def command(query: str, fmt: str, out: Path | None, max_rows: int, timeout_s: float, bound_bytes: int | None,
            data_dir) -> None:
    """Run one read-only SQL statement on the warehouse (tables: see README).

    Writes, ATTACH, COPY, INSTALL/LOAD and reading files outside the data dir are refused.
    Never writes: a catalog that is missing, damaged or built for another folder (a moved or
    copied data dir) is replaced by the same views built in memory for this query.
    The query runs in a worker process: past --timeout or --memory-limit it is stopped with
    one line (exit 2). CSV and Parquet write the types they cannot hold (lists, structs, maps,
    unions, intervals; blobs in CSV) as text, saying so on stderr; the table escapes control
    characters.
    """
    from pipeline import sqlworker

    settings = load()  # the DuckDB bound and threads, resolved here; the query process gets them as arguments
    duckdb_memory = settings.duckdb_memory if bound_bytes is None else sqlworker.duckdb_limit(bound_bytes)
    bound_bytes = bound_bytes or sqlworker.default_bound_bytes(settings.duckdb_memory)
    if fmt == "parquet" and out is None and sys.stdout.isatty():
        raise UserError("--format parquet needs --out FILE (or a pipe)")
    try:
        check_statement(query)  # refused at once, before a worker starts
    except ReadOnlyError as exc:
        raise UserError(str(exc)) from None
    local = reader_dir(data_dir)  # S3: on a local mirror of derived/
    with sqlworker.temporary_workdir() as workdir:
        try:
            result = sqlworker.run(local, query, fmt, max_rows, timeout_s, bound_bytes, Path(workdir), duckdb_memory,
                                   settings.duckdb_threads)
        except sqlworker.QueryStopped as exc:
            raise (Interrupted if exc.kind == "interrupt" else UserError)(str(exc)) from None
        if result.catalog_problem and warehouse_path(local).exists():  # moved, copied or damaged; never rewritten here
            click.echo(f"note: {printable(result.catalog_problem)}; this query used views built in memory, and the next "
                       "`wattline run` (or simulate, import, ingest) rebuilds the file", err=True)
        if result.format_note:
            click.echo(f"note: {result.format_note}", err=True)
        if out is None:
            sys.stdout.flush()
            sqlworker.copy_out(result.path, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return
        try:
            shutil.move(result.path, out)
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
