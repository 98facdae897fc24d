"""Rejected input, kept byte for byte with where it came from and why, never silently dropped.

Layout: ``quarantine/requests/date=D/*.parquet`` where D is the line's arrival day when its
``arrival_ts`` could be read, else the day it was ingested. ``raw`` holds the line's bytes
exactly as read (any encoding), cut to a prefix for lines over the length limit; ``raw_bytes``
is the full length. Re-ingesting a file adds no second entry for the same
(source_file, line_no, raw_sha256).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from collectors.contract import QUARANTINE_DIR, TS
from collectors.days import EPOCH, now_utc
from collectors.storage import DataRoot

QUARANTINE = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line_no", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw", pa.binary(), nullable=False),
        pa.field("raw_bytes", pa.int64(), nullable=False),
        pa.field("raw_sha256", pa.string(), nullable=False),
        pa.field("format", pa.string(), nullable=False),
        pa.field("ingested_ts", TS, nullable=False),
    ]
)
_KEY = ["source_file", "line_no", "raw_sha256"]
OUT_OF_RANGE = "arrival_ts out of range"
"""Reason prefix of a request whose day the pipeline cannot run (collectors/days.py)."""
PREFIX = f"{QUARANTINE_DIR}/requests"
"""Where rejected request lines go, relative to the data dir."""


@dataclass(frozen=True)
class Reject:
    source: str
    line_no: int
    reason: str
    raw: bytes
    raw_bytes: int
    day: str | None = None  # arrival day when known


def quarantine_root(data_dir: Path) -> Path:
    return Path(data_dir) / PREFIX


def _stored_keys(root: DataRoot, folder: str) -> set[tuple]:
    files = root.list(f"{folder}/*.parquet")
    if not files:
        return set()
    table = root.read_parquet(files, columns=_KEY)
    return set(zip(*(table.column(c).to_pylist() for c in _KEY), strict=False))


def reason_kind(reason: str) -> str:
    """A reason without its per-line detail, for counts: 'invalid JSON: Expecting value at column 1'
    → 'invalid JSON', 'invalid UTF-8 at byte 7' → 'invalid UTF-8', '..., got str' → '...'."""
    if reason.startswith(("invalid JSON", "truncated last line", "invalid OTLP JSON", OUT_OF_RANGE)):
        return reason.split(":", 1)[0]
    return re.sub(r"( at byte \d+|, got .*)$", "", reason)


def write_quarantine(rejects: list[Reject], data_dir: Path | str | DataRoot, fmt: str,
                     counts: Counter | None = None) -> int:
    """Write ``rejects`` (atomically, one file per day) under ``data_dir`` (local or ``s3://``);
    returns how many were new, and adds them to ``counts`` by :func:`reason_kind` when given."""
    if not rejects:
        return 0
    root = DataRoot.open(data_dir)
    now = now_utc()  # one reading: a line without a day of its own is filed under the day its ingested_ts is in
    now_ns = (now - EPOCH) // dt.timedelta(microseconds=1) * 1000  # µs: readable as datetime anywhere
    today = now.date().isoformat()
    by_day: dict[str, list[Reject]] = {}
    for r in rejects:
        by_day.setdefault(r.day or today, []).append(r)
    written = 0
    for day, items in sorted(by_day.items()):
        folder = f"{PREFIX}/date={day}"
        seen = _stored_keys(root, folder)
        rows = []
        for r in items:
            key = (r.source, r.line_no, hashlib.sha256(r.raw).hexdigest())
            if key in seen:
                continue
            seen.add(key)
            rows.append((r, key[2]))
        if not rows:
            continue
        table = pa.table(
            {
                "source_file": [r.source for r, _ in rows],
                "line_no": pa.array([r.line_no for r, _ in rows], pa.int64()),
                "reason": [r.reason for r, _ in rows],
                "raw": pa.array([r.raw for r, _ in rows], pa.binary()),
                "raw_bytes": pa.array([r.raw_bytes for r, _ in rows], pa.int64()),
                "raw_sha256": [sha for _, sha in rows],
                "format": [fmt] * len(rows),
                "ingested_ts": pa.array([now_ns] * len(rows), pa.int64()).cast(TS),
            },
            schema=QUARANTINE,
        )
        root.write_parquet(f"{folder}/q-{uuid.uuid4().hex[:12]}.parquet", table)
        written += len(rows)
        if counts is not None:
            counts.update(reason_kind(r.reason) for r, _ in rows)
    return written


def read_quarantine(data_dir: Path | str | DataRoot) -> pa.Table:
    """Every quarantined request line (for tests, reports and asset metadata)."""
    root = DataRoot.open(data_dir)
    files = root.list(f"{PREFIX}/date=*/*.parquet")
    if not files:
        return QUARANTINE.empty_table()
    return root.read_parquet(files)


def reason_counts(table: pa.Table) -> dict[str, int]:
    if table.num_rows == 0:
        return {}
    counts = pc.value_counts(table.column("reason"))
    return {d["values"]: d["counts"] for d in counts.to_pylist()}
