"""Per-GPU time-series tables: the second kind of derived table (the first is a SQL file).

A series table is a declared ``pa.Schema`` and a pure function over one GPU's samples of one
host-day (:class:`GpuSamples`) returning that GPU's rows. :mod:`pipeline.series.engine` reads each
host-day's samples once, runs every registered table's function on each GPU and writes each
table's part with ``pyarrow.parquet.ParquetWriter``. The DDL and the empty views of these tables
come from their schemas (:func:`ddl_columns`). Nothing here knows Dagster or the assets.
"""

from pipeline.series.registry import SERIES_TABLES, series_table
from pipeline.series.samples import GpuSamples, SampleSource
from pipeline.series.table import SeriesTable, ddl_columns, empty_relation_sql

__all__ = ["SERIES_TABLES", "GpuSamples", "SampleSource", "SeriesTable", "ddl_columns", "empty_relation_sql", "series_table"]
