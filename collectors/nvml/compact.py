"""Merge one closed hour's small collector files into one file per host, so a day is ~24 files, not 8,640.

Call :func:`compact_power` from the pipeline or ``wattline collect --compact-only``; the running
collector also calls it for its own host after each hour closes.

Atomicity: the merged file is written under a temporary name, fsynced and renamed into place
(readers never see it partial), and it records its sources in its Parquet metadata; the sources
are deleted right after. A crash between the rename and the deletes leaves identical duplicate
rows for a moment; every later compaction (and every collector start) first finishes such an
interrupted merge by deleting the listed sources ("roll forward"), so nothing is ever lost.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.contract import POWER, conform
from collectors.parquet_sink import TMP_PREFIX, _WRITE_OPTIONS, fsync_dir
from collectors.nvml.flusher import FILE_PREFIX
from collectors.nvml.rows import sort_power

log = logging.getLogger("wattline.collect")

META_KEY = b"wattline.compacted_from"
COMPACTED_TAG = "compacted"
ROW_GROUP_ROWS = 262_144


@dataclass
class CompactionResult:
    hours: int = 0
    files_in: int = 0
    rows: int = 0
    rolled_forward: int = 0
    paths: list[Path] = field(default_factory=list)


def _hour_of(name: str) -> str | None:
    """'nvml-20261202T13-....parquet' → '20261202T13'."""
    if not (name.startswith(FILE_PREFIX) and name.endswith(".parquet")):
        return None
    key = name[len(FILE_PREFIX):len(FILE_PREFIX) + 11]
    return key if len(key) == 11 and key[8] == "T" else None


def _hour_end_unix_s(key: str) -> int:
    return calendar.timegm(time.strptime(key, "%Y%m%dT%H")) + 3600


def roll_forward(folder: Path) -> int:
    """Finish merges interrupted between rename and deletes: delete sources a merged file lists."""
    removed = 0
    for merged in folder.glob(f"{FILE_PREFIX}*-{COMPACTED_TAG}-*.parquet"):
        try:
            meta = pq.read_schema(merged).metadata or {}
        except Exception:
            continue
        for name in json.loads(meta.get(META_KEY, b"[]")):
            src = folder / name
            if src.exists() and src != merged:
                src.unlink()
                removed += 1
    if removed:
        fsync_dir(folder)
        log.warning("%s: finished an interrupted compaction (%d source files removed)", folder, removed)
    return removed


def compact_hour(folder: Path, key: str, sources: list[Path]) -> tuple[Path, int]:
    """Stream ``sources`` into one merged file (bounded memory: row groups of ≤ 256k sorted rows)."""
    out = folder / f"{FILE_PREFIX}{key}-{COMPACTED_TAG}-{uuid.uuid4().hex[:6]}.parquet"
    tmp = folder / f"{TMP_PREFIX}{out.name}.{os.getpid()}"
    schema = POWER.with_metadata({META_KEY: json.dumps([p.name for p in sources]).encode()})
    rows = 0
    batch: list[pa.Table] = []
    batch_rows = 0
    try:
        with open(tmp, "wb") as fh:
            with pq.ParquetWriter(fh, schema, **_WRITE_OPTIONS) as writer:
                def emit():
                    t = sort_power(pa.concat_tables(batch, promote_options="permissive"))
                    writer.write_table(t.replace_schema_metadata(schema.metadata), row_group_size=ROW_GROUP_ROWS)

                for src in sources:
                    t = conform(pq.read_table(src), POWER, where=str(src))
                    batch.append(t)
                    batch_rows += t.num_rows
                    rows += t.num_rows
                    if batch_rows >= ROW_GROUP_ROWS:
                        emit()
                        batch, batch_rows = [], 0
                if batch:
                    emit()
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
        fsync_dir(folder)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for src in sources:
        src.unlink(missing_ok=True)
    fsync_dir(folder)
    return out, rows


def compact_power(data_dir: Path | str, host: str | None = None, now_unix_s: float | None = None,
                  min_age_s: float = 120.0) -> CompactionResult:
    """Compact every closed hour (ended ≥ ``min_age_s`` ago) that has more than one collector file."""
    now = time.time() if now_unix_s is None else now_unix_s
    result = CompactionResult()
    pattern = f"date=*/host={host}" if host else "date=*/host=*"
    for folder in sorted((Path(data_dir) / "power").glob(pattern)):
        result.rolled_forward += roll_forward(folder)
        groups: dict[str, list[Path]] = {}
        for p in sorted(folder.glob(f"{FILE_PREFIX}*.parquet")):
            key = _hour_of(p.name)
            if key:
                groups.setdefault(key, []).append(p)
        for key, files in sorted(groups.items()):
            if len(files) < 2 or _hour_end_unix_s(key) + min_age_s > now:
                continue
            out, rows = compact_hour(folder, key, files)
            result.hours += 1
            result.files_in += len(files)
            result.rows += rows
            result.paths.append(out)
    return result
