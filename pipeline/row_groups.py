"""Row groups of every derived part that pyarrow writes (the series engine's parts, a Python
table's): batches of any size in, row groups of :data:`PART_ROW_GROUP_ROWS` rows out, as DuckDB's
COPY cuts a SQL table's part, so a part's row groups do not depend on how its rows were batched."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.constants import PART_ROW_GROUP_ROWS


class RowGroups:
    """Collects ``add``ed batches and hands ``write`` each full row group (a table of
    PART_ROW_GROUP_ROWS rows, zero-copy slices of the batches) as soon as it is full, and the
    rest at :meth:`finish`. Memory: one row group's rows and the batch being added."""

    def __init__(self, schema: pa.Schema, write: Callable[[pa.Table], None]) -> None:
        self.schema = schema
        self.size = PART_ROW_GROUP_ROWS
        self._write = write
        self._pending: list[pa.RecordBatch] = []
        self._held = 0

    def add(self, batch: pa.RecordBatch) -> None:
        while batch.num_rows:  # a batch may fill several row groups, or end inside one
            take = min(batch.num_rows, self.size - self._held)
            self._pending.append(batch.slice(0, take))
            self._held += take
            batch = batch.slice(take)
            if self._held == self.size:
                self._flush()

    def finish(self) -> None:
        """Write the last, shorter row group, if any rows wait."""
        if self._held:
            self._flush()

    def _flush(self) -> None:
        group = pa.Table.from_batches(self._pending, schema=self.schema)
        self._pending, self._held = [], 0
        self._write(group)


def write_group(writer: pq.ParquetWriter, group: pa.Table) -> None:
    """``group`` as one row group of ``writer``'s file (RowGroups cut it to size)."""
    writer.write_table(group, row_group_size=max(group.num_rows, 1))
