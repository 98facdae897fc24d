"""Append request rows to ``requests/date=D/`` exactly once.

A row is identified by ``(request_id, endpoint)``. A repeat with identical content (a file
ingested twice, lines re-read after a crash between a Parquet flush and its checkpoint) is
counted as a duplicate and not written; a repeat with *different* content is a real conflict
and goes to quarantine. Both are checked within the batch and against what is stored for the
row's arrival day, so the store is idempotent by content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads

from collectors.contract import DATASETS, REQUESTS
from collectors.parquet_sink import write_dataset
from collectors.requests.quarantine import Reject

KEY = ["request_id", "endpoint"]
COLUMNS = REQUESTS.names
TS_COLUMNS = [f.name for f in REQUESTS if pa.types.is_timestamp(f.type)]
VALUE_COLUMNS = [c for c in COLUMNS if c not in KEY]
META = ["_src", "_line", "_raw"]
"""Where each row came from: source file, line number, raw bytes (null when not kept)."""

FRAME_SCHEMA = {
    "request_id": pl.String,
    "endpoint": pl.String,
    **{c: pl.Int64 for c in TS_COLUMNS},
    "prompt_tokens": pl.Int32,
    "output_tokens": pl.Int32,
    "status": pl.String,
    "_src": pl.String,
    "_line": pl.Int64,
    "_raw": pl.Binary,
}
"""A parsed batch: contract columns with timestamps as epoch ns, plus provenance."""


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def day_expr() -> pl.Expr:
    return pl.from_epoch(pl.col("arrival_ts"), time_unit="ns").dt.strftime("%Y-%m-%d")


def to_contract(frame: pl.DataFrame) -> pa.Table:
    table = frame.select(COLUMNS).to_arrow()
    cols = [table.column(c).cast(f.type) for c, f in zip(COLUMNS, REQUESTS)]
    return pa.Table.from_arrays(cols, schema=REQUESTS)


def _same_content() -> pl.Expr:
    return pl.all_horizontal([pl.col(c).eq_missing(pl.col(f"{c}_old")) for c in VALUE_COLUMNS])


@dataclass
class AddResult:
    written: int = 0
    duplicates: int = 0
    conflicts: list[Reject] = field(default_factory=list)


class RequestStore:
    """The requests dataset under ``data_dir``, with each touched day's keys cached in memory."""

    def __init__(self, data_dir: Path, prefix: str = "req") -> None:
        self.data_dir = Path(data_dir)
        self.prefix = prefix
        self._days: dict[str, pl.DataFrame] = {}

    def _stored(self, day: str) -> pl.DataFrame:
        if day not in self._days:
            folder = DATASETS["requests"].partition_dir(self.data_dir, day)
            files = sorted(folder.glob("*.parquet"))
            if files:
                table = pads.dataset(files, format="parquet").to_table(columns=COLUMNS)
                stored = pl.from_arrow(table).with_columns(pl.col(TS_COLUMNS).dt.epoch("ns"))
                self._days[day] = stored.cast({c: FRAME_SCHEMA[c] for c in COLUMNS}).unique(KEY, keep="first")
            else:
                self._days[day] = pl.DataFrame(schema={c: FRAME_SCHEMA[c] for c in COLUMNS})
        return self._days[day]

    def add(self, batch: pl.DataFrame) -> AddResult:
        """Write the new rows of ``batch`` (FRAME_SCHEMA, in input order); report the rest."""
        result = AddResult()
        if batch.height == 0:
            return result
        batch = batch.with_row_index("_i").with_columns(_day=day_expr())
        first = batch.unique(KEY, keep="first", maintain_order=True)
        repeats = batch.join(first.select("_i"), on="_i", how="anti")
        self._classify(repeats, first.select(KEY + VALUE_COLUMNS + ["_src", "_line"]), "seen earlier", result)

        new_parts = []
        for day in first["_day"].unique().sort().to_list():
            rows = first.filter(pl.col("_day") == day)
            stored = self._stored(day)
            known = rows.join(stored.select(KEY), on=KEY, how="semi")
            self._classify(known, stored, "already stored", result)
            fresh = rows.join(stored.select(KEY), on=KEY, how="anti")
            if fresh.height:
                new_parts.append(fresh)
        if new_parts:
            fresh = pl.concat(new_parts)
            try:
                write_dataset(to_contract(fresh), self.data_dir, "requests", prefix=self.prefix, sort_by=["arrival_ts"])
            except BaseException:
                for part in new_parts:  # some days may be on disk already: re-read them next time
                    self._days.pop(part["_day"][0], None)
                raise
            # Only now are the rows stored: a failed write must leave them new for the retry.
            for part in new_parts:
                day = part["_day"][0]
                self._days[day] = pl.concat([self._days[day], part.select(COLUMNS)])
            result.written = fresh.height
        return result

    @staticmethod
    def _classify(rows: pl.DataFrame, reference: pl.DataFrame, where: str, result: AddResult) -> None:
        """Identical to ``reference`` → duplicate; different → a conflict for quarantine."""
        if rows.height == 0:
            return
        ref = reference.select(KEY + VALUE_COLUMNS).rename({c: f"{c}_old" for c in VALUE_COLUMNS})
        joined = rows.join(ref, on=KEY, how="left").with_columns(_same=_same_content())
        result.duplicates += int(joined["_same"].sum())
        for row in joined.filter(~pl.col("_same")).iter_rows(named=True):
            raw = row["_raw"] if row["_raw"] is not None else b""
            result.conflicts.append(
                Reject(
                    row["_src"],
                    row["_line"],
                    f"duplicate (request_id, endpoint) with different content, {where}",
                    raw,
                    len(raw),
                    row["_day"],
                )
            )
