"""`wattline sql` output: every DuckDB type written in every format, and text for a terminal that
cannot forge lines.

CSV has no lists, structs, maps or unions and Parquet (through Arrow) no unions or intervals:
such a column is written as text (nested values as JSON, intervals and blobs as DuckDB writes
them as VARCHAR) and a note says which, rather than failing on the whole result. The table
format is for people: values and names go through :func:`collectors.printable.printable`, so a
value holding ``\\n`` or an ANSI escape prints as ``\\x0a`` / ``\\x1b`` and stays in its cell.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from collectors.printable import printable

FORMATS = ("table", "csv", "json", "parquet")
BATCH_ROWS = 10_000
"""Rows converted to Python at a time (JSON, text columns): a large result is not held twice."""


def blob_text(value: bytes) -> str:
    """A BLOB as DuckDB casts it to VARCHAR: printable ASCII kept, other bytes and ``\\ " '`` as ``\\xNN``."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x5C, 0x22, 0x27) else f"\\x{b:02X}" for b in value)


def interval_text(value: Any) -> str:
    """An INTERVAL (Arrow's month-day-nano) as DuckDB casts it to VARCHAR: ``1 year 2 months 3 days 01:02:03.5``."""
    months, days, nanos = value.months, value.days, value.nanoseconds
    years, months = int(months / 12), months - 12 * int(months / 12)
    parts = [f"{n} {unit}{'s' if abs(n) != 1 else ''}" for n, unit in ((years, "year"), (months, "month"), (days, "day")) if n]
    micros = int(nanos / 1000)
    if micros or not parts:
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, frac = divmod(micros, 1_000_000)
        clock = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        parts.append(clock + (f".{frac:06d}".rstrip("0") if frac else ""))
    return " ".join(parts)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return blob_text(value)
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    if isinstance(value, decimal.Decimal | dt.date | dt.time | dt.timedelta):
        return str(value)
    return str(value)


def _jsonable(value: Any) -> Any:
    # An interval is a named tuple: json would write it as an array before asking _json_default.
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def json_text(value: Any) -> str:
    """One value as JSON (maps as ``[[key, value], ...]``, blobs and intervals as their text)."""
    return json.dumps(_jsonable(value), default=_json_default)


def _kind(type_: pa.DataType) -> str | None:
    """Why a column needs converting for CSV or Parquet: its DuckDB kind, or None."""
    if pa.types.is_union(type_):
        return "union"
    if pa.types.is_map(type_):
        return "map"
    if pa.types.is_struct(type_):
        return "struct"
    if pa.types.is_nested(type_):
        return "list"
    if pa.types.is_interval(type_):
        return "interval"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_):
        return "blob"
    return None


_CANNOT_HOLD = {
    "csv": {"union", "map", "struct", "list", "interval", "blob"},  # blobs: raw bytes would make the file not text
    "parquet": {"union", "interval"},
}


def _as_text(column: pa.ChunkedArray, kind: str) -> pa.ChunkedArray:
    text = blob_text if kind == "blob" else interval_text if kind == "interval" else json_text
    chunks = []
    for chunk in column.chunks:
        for start in range(0, len(chunk), BATCH_ROWS):
            values = chunk.slice(start, BATCH_ROWS).to_pylist()
            chunks.append(pa.array([None if v is None else text(v) for v in values], pa.large_string()))
    return pa.chunked_array(chunks, pa.large_string())


def for_format(table: pa.Table, fmt: str) -> tuple[pa.Table, str | None]:
    """``table`` with the columns ``fmt`` cannot hold written as text, and a note saying which."""
    cannot = _CANNOT_HOLD.get(fmt, set())
    converted = []
    for i, field in enumerate(table.schema):
        kind = _kind(field.type)
        if kind in cannot:
            table = table.set_column(i, pa.field(field.name, pa.large_string()), _as_text(table.column(i), kind))
            how = "with \\xNN escapes" if kind == "blob" else "as DuckDB writes it" if kind == "interval" else "as JSON"
            converted.append(f"{printable(field.name, 200)} ({kind}, {how})")
    if not converted:
        return table, None
    return table, f"--format {fmt} has no place for some types: wrote column(s) {', '.join(converted)} as text"


def cell_text(value: Any) -> str:
    """A value as the table shows it: NULL, floats to 6 significant digits, nested values as JSON,
    blobs and intervals as DuckDB's text; control characters escaped."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, bytes):
        return printable(blob_text(value))
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value)
    if isinstance(value, list | dict | tuple):
        return printable(json_text(value))
    return printable(value)


def render_table(table: pa.Table, max_rows: int) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Values and names as Text, never markup: 'GPU [h200] ok' and '[/x]' print as they are.
    view = Table(show_header=True, header_style="bold", box=None)
    for name in table.column_names:
        view.add_column(Text(printable(name)), overflow="fold")
    shown = table.slice(0, max_rows)
    columns = [column.to_pylist() for column in shown.columns]  # by position: names may repeat
    for row in zip(*columns, strict=True):
        view.add_row(*(Text(cell_text(v)) for v in row))
    buf = io.StringIO()
    Console(file=buf, width=max(120, 14 * table.num_columns), force_terminal=False).print(view)
    more = f"({table.num_rows} rows, {max_rows} shown)\n" if table.num_rows > max_rows else f"({table.num_rows} rows)\n"
    return buf.getvalue() + more


def _float32_as_written(column: pa.Array) -> list:
    """A FLOAT column's values as the shortest decimals that read back as the same 4-byte float
    (``58.4``, as DuckDB prints it), not the float's exact binary value widened to 8 bytes
    (``58.400001525878906``): the same number at the precision it was stored with."""
    return [None if text is None else float(text) for text in pc.cast(column, pa.string()).to_pylist()]


def write_json(table: pa.Table, out: BinaryIO) -> None:
    """One JSON array of row objects, written batch by batch; a repeated column name repeats its key."""
    keys = [json.dumps(name) for name in table.column_names]
    out.write(b"[")
    sep = ""
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        columns = [_float32_as_written(column) if column.type == pa.float32() else column.to_pylist() for column in batch.columns]
        for row in zip(*columns, strict=True):
            fields = ", ".join(f"{key}: {json_text(value)}" for key, value in zip(keys, row, strict=True))
            out.write(f"{sep}{{{fields}}}".encode())
            sep = ", "
    out.write(b"]\n")


def write(table: pa.Table, fmt: str, path: Path, max_rows: int) -> str | None:
    """``table`` in ``fmt`` into ``path``; returns a note when columns were written as text."""
    table, note = for_format(table, fmt)
    if fmt == "table":
        path.write_text(render_table(table, max_rows))
    elif fmt == "csv":
        pacsv.write_csv(table, str(path))
    elif fmt == "json":
        with path.open("wb") as out:
            write_json(table, out)
    else:
        pq.write_table(table, str(path), compression="zstd")
    return note
