"""Append request rows to ``requests/date=D/`` exactly once.

A row is identified by ``(request_id, endpoint)``. A repeat with identical content (a file
ingested twice, lines re-read after a crash between a Parquet flush and its checkpoint) is
counted as a duplicate and not written; a repeat with *different* content is a real conflict
and goes to quarantine. Both are checked within the batch and against what is stored for the
row's arrival day, so the store is idempotent by content.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import polars as pl
import pyarrow as pa

from collectors.atomic import exclusive_lock
from collectors.contract import ADDED_COLUMNS, DATASETS, REQUESTS
from collectors.parquet_sink import write_dataset
from collectors.requests.quarantine import Reject
from collectors.storage import DataRoot

KEY = ["request_id", "endpoint"]
COLUMNS = REQUESTS.names
TS_COLUMNS = [f.name for f in REQUESTS if pa.types.is_timestamp(f.type)]
VALUE_COLUMNS = [c for c in COLUMNS if c not in KEY]
COMPARED_COLUMNS = [c for c in VALUE_COLUMNS if c not in ADDED_COLUMNS["requests"]]
"""What makes a repeat of a stored row identical: a row stored before ``max_tokens`` or ``replica``
existed (NULL there) and the same line read again now with it are one request, not a conflict."""
META = ["_src", "_line", "_raw"]
"""Where each row came from: source file, line number, raw bytes (null when not kept)."""

FRAME_SCHEMA = {
    "request_id": pl.String,
    "endpoint": pl.String,
    **{c: pl.Int64 for c in TS_COLUMNS},
    "prompt_tokens": pl.Int32,
    "output_tokens": pl.Int32,
    "status": pl.String,
    "max_tokens": pl.Int32,
    "replica": pl.String,
    "_src": pl.String,
    "_line": pl.Int64,
    "_raw": pl.Binary,
}
"""A parsed batch: contract columns with timestamps as epoch ns, plus provenance."""


DEFAULT_CACHE_BYTES = 256 << 20
"""Bytes of row fingerprints kept in memory (24 per row: ~11 million rows, a day of a large fleet);
older days are read again from their files when needed."""
FINGERPRINT_COLUMNS = ["_k1", "_k2", "_v"]
FINGERPRINT_SCHEMA = {c: pl.UInt64 for c in FINGERPRINT_COLUMNS}


def fingerprints(rows: pl.DataFrame) -> pl.DataFrame:
    """Per row: two independent 64-bit hashes of the key and one of the other contract columns
    (FRAME_SCHEMA types on both sides, so stored and new rows hash alike within a process)."""
    return rows.select(
        _k1=pl.struct(KEY).hash(seed=1),
        _k2=pl.struct(KEY).hash(seed=2),
        _v=pl.struct(COMPARED_COLUMNS).hash(seed=3),
    )


@contextmanager
def writer_lock(data_dir: Path | str | DataRoot) -> Iterator[None]:
    """One request writer at a time per data dir (bulk imports and followers may overlap).

    The lock is a local file (``DataRoot.state_dir()``): for an ``s3://`` data dir it serialises
    the writers of this machine only; run one request writer per S3 data dir across machines."""
    with exclusive_lock(DataRoot.open(data_dir).state_dir() / "requests.lock"):
        yield


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def rows_to_frame(rows: list[dict]) -> tuple[pl.DataFrame, list[Reject]]:
    """Checked rows (with ``_src``, ``_line``, ``_raw``) → a FRAME_SCHEMA batch, and a reject for
    each row the batch's types cannot hold: one such row is quarantined alone, never its batch.
    (The importers check ranges before this; it is the net under those checks.)"""
    if not rows:
        return empty_frame(), []
    try:
        return pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row"), []
    except Exception:  # any failure: find the row, keep the rest
        pass
    good, rejects = [], []
    for row in rows:
        try:
            pl.DataFrame([row], schema=FRAME_SCHEMA, orient="row")
        except Exception as exc:
            raw = row.get("_raw") or b""
            rejects.append(Reject(row["_src"], row["_line"], f"a value does not fit the contract's types ({type(exc).__name__})",
                                  raw, len(raw)))
            continue
        good.append(row)
    return (pl.DataFrame(good, schema=FRAME_SCHEMA, orient="row") if good else empty_frame()), rejects


def day_expr() -> pl.Expr:
    return pl.from_epoch(pl.col("arrival_ts"), time_unit="ns").dt.strftime("%Y-%m-%d")


def to_contract(frame: pl.DataFrame) -> pa.Table:
    table = frame.select(COLUMNS).to_arrow()
    cols = [table.column(c).cast(f.type) for c, f in zip(COLUMNS, REQUESTS, strict=False)]
    return pa.Table.from_arrays(cols, schema=REQUESTS)


def _same_content() -> pl.Expr:
    return pl.all_horizontal([pl.col(c).eq_missing(pl.col(f"{c}_old")) for c in VALUE_COLUMNS])


@dataclass
class AddResult:
    written: int = 0
    duplicates: int = 0
    conflicts: list[Reject] = field(default_factory=list)


class RequestStore:
    """The requests dataset under ``data_dir`` (local or ``s3://``), with a fingerprint of each
    touched day's rows cached in memory.

    A row's fingerprint is 24 bytes whatever its request id's length: two independent 64-bit
    hashes of ``(request_id, endpoint)`` and one of the other columns (is a repeat identical?).
    The cache holds at most ``max_cache_bytes``; past it the least recently used days are dropped
    and read again from their files when a batch touches them.

    Callers serialise :meth:`add` across processes (see :func:`writer_lock`); the cache then
    only needs the files other writers added, which :meth:`_stored` picks up by name.
    """

    def __init__(self, data_dir: Path | str | DataRoot, prefix: str = "req",
                 max_cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.root = DataRoot.open(data_dir)
        self.data_dir = self.root.location("")
        self.prefix = prefix
        self.max_cache_bytes = max_cache_bytes
        self._days: OrderedDict[str, pl.DataFrame] = OrderedDict()  # least recently used first
        self._files: dict[str, set[str]] = {}  # per day: the files already in ``_days``

    @property
    def cache_bytes(self) -> int:
        return sum(df.estimated_size() for df in self._days.values())

    def _stored(self, day: str) -> pl.DataFrame:
        """Fingerprints of the day's stored rows, including files another writer added since we last looked."""
        folder = DATASETS["requests"].partition_key(day)
        if day not in self._days:
            self._days[day] = pl.DataFrame(schema=FINGERPRINT_SCHEMA)
            self._files[day] = set()
        self._days.move_to_end(day)
        known = self._files[day]
        new = [k for k in self.root.list(f"{folder}/*.parquet") if PurePosixPath(k).name not in known]
        if new:
            table = self.root.read_parquet(new, columns=COLUMNS, schema=REQUESTS)
            rows = pl.from_arrow(table).with_columns(pl.col(TS_COLUMNS).dt.epoch("ns"))
            rows = fingerprints(rows.cast({c: FRAME_SCHEMA[c] for c in COLUMNS}))
            self._days[day] = pl.concat([self._days[day], rows]).unique(["_k1", "_k2"], keep="first",
                                                                         maintain_order=True)
            known.update(PurePosixPath(k).name for k in new)
        return self._days[day]

    def _trim(self, keep: str | None = None) -> None:
        """Drop least recently used days until the cache fits (``keep``, the day just used, last)."""
        total = self.cache_bytes
        for day in [d for d in self._days if d != keep] + ([keep] if keep in self._days else []):
            if total <= self.max_cache_bytes:
                break
            total -= self._days.pop(day).estimated_size()
            del self._files[day]

    def add(self, batch: pl.DataFrame) -> AddResult:
        """Write the new rows of ``batch`` (FRAME_SCHEMA, in input order); report the rest."""
        result = AddResult()
        if batch.height == 0:
            return result
        batch = batch.with_row_index("_i").with_columns(_day=day_expr())
        first = batch.unique(KEY, keep="first", maintain_order=True)
        repeats = batch.join(first.select("_i"), on="_i", how="anti")
        self._classify(repeats, first.select(KEY + VALUE_COLUMNS + ["_src", "_line"]), "seen earlier", result)

        first = pl.concat([first, fingerprints(first).select(FINGERPRINT_COLUMNS)], how="horizontal")
        new_parts = []
        for day in first["_day"].unique().sort().to_list():
            rows = first.filter(pl.col("_day") == day)
            stored = self._stored(day)
            known = rows.join(stored, on=["_k1", "_k2"], how="inner", suffix="_old")
            self._classify_stored(known, result)
            fresh = rows.join(stored.select("_k1", "_k2"), on=["_k1", "_k2"], how="anti")
            if fresh.height:
                new_parts.append(fresh)
        if new_parts:
            fresh = pl.concat(new_parts)
            # A failed write leaves the cache as it was: the rows stay new for the retry, and any
            # day already on disk is picked up as another writer's file on the next look.
            written = write_dataset(to_contract(fresh), self.root, "requests", prefix=self.prefix, sort_by=["arrival_ts"])
            for part in new_parts:
                day = part["_day"][0]
                if day in self._days:
                    self._days[day] = pl.concat([self._days[day], part.select(FINGERPRINT_COLUMNS)])
            for location in written:
                path = PurePosixPath(str(location))  # a Path, or an s3:// URL
                day = path.parent.name.removeprefix("date=")
                if day in self._files:
                    self._files[day].add(path.name)
            result.written = fresh.height
        self._trim(keep=first["_day"].max())
        return result

    @staticmethod
    def _classify_stored(joined: pl.DataFrame, result: AddResult) -> None:
        """Rows whose key is stored: the same fingerprint of values → duplicate, else a conflict."""
        if joined.height == 0:
            return
        same = joined["_v"] == joined["_v_old"]
        result.duplicates += int(same.sum())
        for row in joined.filter(~same).iter_rows(named=True):
            raw = row["_raw"] if row["_raw"] is not None else b""
            result.conflicts.append(Reject(row["_src"], row["_line"],
                                           "duplicate (request_id, endpoint) with different content, already stored",
                                           raw, len(raw), row["_day"]))

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
