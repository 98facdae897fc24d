"""Merge one closed hour's small collector files into one file per host, so a day is ~24 files, not 8,640.

Call :func:`compact_power` from the pipeline or ``wattline collect --compact-only``; the running
collector also calls it for its own host after each hour closes.

Atomicity: the merged file is written under a temporary name, fsynced and renamed into place
(readers never see it partial), and it records its sources in its Parquet metadata; the sources
are deleted right after. A crash between the rename and the deletes leaves identical duplicate
rows for a moment; every later compaction (and every collector start) first finishes such an
interrupted merge by deleting the listed sources ("roll forward"), so nothing is ever lost.

On an ``s3://`` data dir an hour's sources are downloaded to a temporary folder, merged there the
same way, the merged file uploaded (visible only once whole), then the sources deleted: the same
order, so the same roll forward finishes a merge interrupted between upload and deletes.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.atomic import TMP_PREFIX, fsync_dir, parquet_options
from collectors.contract import POWER, conform
from collectors.names import check_path_name
from collectors.nvml.flusher import FILE_PREFIX
from collectors.nvml.rows import sort_power
from collectors.storage import DataRoot

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
    paths: list[Path | str] = field(default_factory=list)  # Paths, or s3:// URLs on S3


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
    return roll_forward_in(DataRoot.open(folder), "")


def _in(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def roll_forward_in(root: DataRoot, folder: str) -> int:
    """:func:`roll_forward` for the folder key ``folder`` of a data root (local or S3)."""
    removed = 0
    present = set(root.list(_in(folder, f"{FILE_PREFIX}*.parquet")))
    for merged in root.list(_in(folder, f"{FILE_PREFIX}*-{COMPACTED_TAG}-*.parquet")):
        try:
            meta = root.read_schema(merged).metadata or {}
        except Exception:
            continue
        for name in json.loads(meta.get(META_KEY, b"[]")):
            src = _in(folder, name)
            if src in present and src != merged:
                root.delete(src)
                present.discard(src)
                removed += 1
    if removed:
        if root.is_local:
            fsync_dir(root.location(folder))
        log.warning("%s: finished an interrupted compaction (%d source files removed)", root.location(folder), removed)
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
            writer = None

            def emit():
                nonlocal writer
                t = sort_power(pa.concat_tables(batch, promote_options="permissive"))
                if writer is None:  # the first row group decides the float encodings
                    writer = pq.ParquetWriter(fh, schema, **parquet_options(schema, t))
                writer.write_table(t.replace_schema_metadata(schema.metadata), row_group_size=ROW_GROUP_ROWS)

            try:
                for src in sources:
                    t = conform(pq.read_table(src), POWER, where=str(src))
                    batch.append(t)
                    batch_rows += t.num_rows
                    rows += t.num_rows
                    if batch_rows >= ROW_GROUP_ROWS:
                        emit()
                        batch, batch_rows = [], 0
                if writer is None and not batch:  # no rows at all: still a file with the schema
                    batch = [POWER.empty_table()]
                if batch:
                    emit()
            finally:
                if writer is not None:
                    writer.close()
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


def _compact_remote(root: DataRoot, folder: str, key: str, sources: list[str]) -> tuple[str, int]:
    """:func:`compact_hour` for an S3 folder: merge local copies, upload, then delete the sources."""
    with tempfile.TemporaryDirectory(prefix="wattline-compact-") as tmp:
        staged = root.stage(sources, tmp)
        out, rows = compact_hour(Path(tmp) / folder, key, staged)
        location = root.upload(out, _in(folder, out.name))
    for src in sources:
        root.delete(src)
    return location, rows


def compact_power(data_dir: Path | str | DataRoot, host: str | None = None, now_unix_s: float | None = None,
                  min_age_s: float = 120.0) -> CompactionResult:
    """Compact every closed hour (ended ≥ ``min_age_s`` ago) that has more than one collector file;
    ``data_dir`` is local or ``s3://``."""
    now = time.time() if now_unix_s is None else now_unix_s
    root = DataRoot.open(data_dir)
    result = CompactionResult()
    pattern = f"power/date=*/host={check_path_name(host, 'host') if host else '*'}/{FILE_PREFIX}*.parquet"
    folders = sorted({str(PurePosixPath(k).parent) for k in root.list(pattern)}, key=lambda f: f.split("/"))
    for folder in folders:
        result.rolled_forward += roll_forward_in(root, folder)
        groups: dict[str, list[str]] = {}
        for src in root.list(_in(folder, f"{FILE_PREFIX}*.parquet")):
            key = _hour_of(PurePosixPath(src).name)
            if key:
                groups.setdefault(key, []).append(src)
        for key, files in sorted(groups.items()):
            if len(files) < 2 or _hour_end_unix_s(key) + min_age_s > now:
                continue
            if root.is_local:
                out, rows = compact_hour(root.location(folder), key, [root.location(f) for f in files])
            else:
                out, rows = _compact_remote(root, folder, key, files)
            result.hours += 1
            result.files_in += len(files)
            result.rows += rows
            result.paths.append(out)
    return result
