"""The declaration of a series table and the SQL its schema gives (DDL, empty views)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from pipeline.series.samples import GpuSamples

PART_KEY = pa.field("date", pa.date32())
"""The column every stored part starts with (the partition day), added by the engine."""


@dataclass(frozen=True)
class SeriesTable:
    """A per-GPU table: ``schema`` is its rows' columns (without the date), ``rows`` one GPU's
    rows from its samples (a pure function: a batch of ``schema``, sorted as stored)."""

    name: str
    schema: pa.Schema
    rows: Callable[[GpuSamples], pa.RecordBatch]
    parquet_options: tuple[tuple[str, object], ...] = ()
    """Extra ``pyarrow.parquet.ParquetWriter`` options (encodings of a raw-sized table)."""

    @property
    def stored_schema(self) -> pa.Schema:
        """The part's columns: the date, then the rows'."""
        return self.schema.insert(0, PART_KEY)


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _sql_type(t.value_type)
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    names = {
        pa.string(): "VARCHAR", pa.uint8(): "UTINYINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
        pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.date32(): "DATE",
    }
    if t not in names:
        raise TypeError(f"no SQL type for {t}")
    return names[t]


def ddl_columns(table: SeriesTable) -> str:
    """``"date DATE, host VARCHAR, ..."``: the stored part's columns as DuckDB reads them."""
    return ", ".join(f"{f.name} {_sql_type(f.type)}" for f in table.stored_schema)


def empty_relation_sql(table: SeriesTable) -> str:
    """A typed relation of the table's stored columns with no rows."""
    typed = ", ".join(f"NULL::{_sql_type(f.type)} AS {f.name}" for f in table.stored_schema)
    return f"SELECT {typed} WHERE false"
