"""`wattline sql "QUERY"`: read-only ad-hoc SQL on the warehouse."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline.cli.common import Interrupted, UserError, data_dir_option
from pipeline.constants import warehouse_path
from pipeline.readonly import DEFAULT_TIMEOUT_S, QueryInterrupted, ReadOnlyError, run_query
from pipeline.warehouse import reader_dir


def _render_table(table: pa.Table, max_rows: int) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Values and names as Text, never markup: 'GPU [h200] ok' and '[/x]' print as they are.
    view = Table(show_header=True, header_style="bold", box=None if table.num_columns > 8 else None)
    for name in table.column_names:
        view.add_column(Text(name), overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(Text("NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)) for v in row.values()))
    buf = io.StringIO()
    Console(file=buf, width=max(120, 14 * table.num_columns), force_terminal=False).print(view)
    more = f"({table.num_rows} rows, {max_rows} shown)\n" if table.num_rows > max_rows else f"({table.num_rows} rows)\n"
    return buf.getvalue() + more


@click.command("sql")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here instead of stdout.")
@click.option("--max-rows", type=int, default=50, show_default=True, help="Rows shown by --format table.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT_S,
              show_default=True, metavar="SECONDS", help="Stop the query after this many seconds (exit 2).")
@data_dir_option(access="read")
def command(query: str, fmt: str, out: Path | None, max_rows: int, timeout_s: float, data_dir) -> None:
    """Run one read-only SQL statement on the warehouse (tables: see README).

    Writes, ATTACH, COPY, INSTALL/LOAD and reading files outside the data dir are refused.
    Never writes: a catalog that is missing, damaged or built for another folder (a moved or
    copied data dir) is replaced by the same views built in memory for this query.
    """
    notes: list[str] = []
    try:
        local = reader_dir(data_dir)  # S3: on a local mirror of derived/
        table = run_query(local, query, timeout_s, notes)
    except QueryInterrupted as exc:
        raise Interrupted(str(exc)) from None
    except ReadOnlyError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:  # e.g. no catalog yet on a read-only data dir
        raise UserError(f"cannot query {data_dir}: {exc}") from None
    if notes and warehouse_path(local).exists():  # moved, copied or damaged; never rewritten here
        click.echo(f"note: {notes[0]}; this query used views built in memory, and the next "
                   "`wattline run` (or simulate, import, ingest) rebuilds the file", err=True)
    if fmt == "table":
        text = _render_table(table, max_rows)
    elif fmt == "csv":
        buf = pa.BufferOutputStream()
        pacsv.write_csv(table, buf)
        text = buf.getvalue().to_pybytes().decode()
    elif fmt == "json":
        text = json.dumps(table.to_pylist(), default=str, indent=None) + "\n"
    else:
        if out is None and sys.stdout.isatty():
            raise UserError("--format parquet needs --out FILE (or a pipe)")
        target = str(out) if out else pa.PythonFile(sys.stdout.buffer, mode="w")
        pq.write_table(table, target, compression="zstd")
        return
    if out:
        out.write_text(text)
    else:
        click.echo(text, nl=False)
