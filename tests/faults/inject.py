"""Fault injectors: each turns a good file (or data dir) into one specific kind of bad input.

Shared by every ``tests/faults/test_*.py``; add collector or request-log injectors here too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def truncate_footer(path: Path, cut: int = 20) -> bytes:
    """Cut the last ``cut`` bytes (the footer's length and magic), as a writer killed mid-close
    or a partial copy would; returns the bytes left."""
    data = path.read_bytes()[:-cut]
    path.write_bytes(data)
    return data


def retype_column(path: Path, column: str, to: pa.DataType) -> None:
    """Rewrite the file with ``column`` cast to ``to`` (e.g. float32 power written as int32)."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    pq.write_table(table.set_column(i, column, table.column(column).cast(to)), path)


def add_column(path: Path, name: str, value=0) -> None:
    """Rewrite the file with one more column than the contract has (a newer writer's field)."""
    table = pq.read_table(path)
    pq.write_table(table.append_column(name, pa.array([value] * table.num_rows)), path)


def copy_beside(path: Path, name: str) -> Path:
    """A byte-identical copy in the same partition (an importer or `cp` run twice)."""
    target = path.with_name(name)
    shutil.copyfile(path, target)
    return target


def rewrite_same_rows(path: Path, name: str) -> Path:
    """The same rows in a new file with different bytes (re-imported with other writer settings)."""
    target = path.with_name(name)
    pq.write_table(pq.read_table(path), target, compression="snappy", row_group_size=100)
    return target
