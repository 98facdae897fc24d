"""Atomic Parquet writes (core: imports nothing of ours), shared by every writer.

A file becomes visible only complete: it is written under a hidden temporary name in the
target folder, fsynced, renamed into place and the folder fsynced. Readers glob ``*.parquet``
and never match the temporary name, so a process killed at any instant leaves only whole files.
:mod:`collectors.storage` builds on it (and says what is atomic on S3);
:func:`collectors.parquet_sink.write_dataset` writes a dataset's files through storage.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

TMP_PREFIX = ".tmp-"


SAMPLE_ROWS = 262_144
"""Rows that decide the float encodings of a file (its first row group's worth)."""
SPLIT_DISTINCT_FRACTION = 0.5
"""A float column whose sample is mostly distinct values is byte-stream-split, not dictionary-encoded:
NVML's 1 s average rarely repeats at 10 Hz, and a dictionary of it costs 4 B per row plus the index."""


def parquet_options(schema: pa.Schema, sample: pa.Table | None = None) -> dict:
    """The writer options of every raw file: sorted, dictionary-encoded ids and floats, delta-encoded
    timestamps and integers, zstd. Floats that ``sample`` (the data, or its first rows) shows to be
    mostly distinct are byte-stream-split instead. (A 10 Hz power trace: ~5.3 B/sample, bench/storage.py.)"""
    delta = [f.name for f in schema if pa.types.is_timestamp(f.type) or pa.types.is_integer(f.type)]
    split = [f.name for f in schema if pa.types.is_floating(f.type) and _mostly_distinct(sample, f.name)]
    return dict(
        compression="zstd",
        compression_level=3,
        write_statistics=True,
        use_dictionary=[f.name for f in schema if f.name not in delta and f.name not in split],
        column_encoding={name: "DELTA_BINARY_PACKED" for name in delta} | {name: "BYTE_STREAM_SPLIT" for name in split},
    )


def _mostly_distinct(sample: pa.Table | None, column: str) -> bool:
    if sample is None or column not in sample.column_names:
        return False
    values = sample.column(column).drop_null()
    return len(values) >= 64 and pc.count_distinct(values).as_py() > SPLIT_DISTINCT_FRACTION * len(values)


@contextlib.contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (made, with its folder, if missing) while inside:
    one process or thread at a time, released also when the process dies. ``on_wait``: called
    once, before waiting, when another holder has it (e.g. to say so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (fcntl.LOCK_NB if on_wait else 0))
        except BlockingIOError:
            assert on_wait is not None
            on_wait()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet_to(table: pa.Table, sink, row_group_size: int = 1_000_000) -> None:
    """Encode ``table`` into an open binary file: the one Parquet layout every writer uses."""
    pq.write_table(table, sink, row_group_size=row_group_size, **parquet_options(table.schema, table.slice(0, SAMPLE_ROWS)))


def _replace_atomically(path: Path | str, write: Callable, before_rename: Callable[[], None] | None = None) -> Path:
    """``write(fh)`` into a hidden temporary file beside ``path``, fsync it, run ``before_rename``,
    rename it over ``path`` and fsync the folder; on any failure the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_parquet_atomic(table: pa.Table, path: Path | str, row_group_size: int = 1_000_000) -> Path:
    """Write ``table`` to ``path`` so that ``path`` is either absent or complete."""
    return _replace_atomically(path, lambda fh: write_parquet_to(table, fh, row_group_size))


def write_parquet_stream_atomic(
    tables: Iterable[pa.Table], schema: pa.Schema, path: Path | str, before_rename: Callable[[], None] | None = None
) -> Path:
    """:func:`write_parquet_atomic` for rows that come a table at a time (each its own row group),
    so a large file is rewritten in bounded memory; ``before_rename`` runs once the rows are
    written, just before the rename (e.g. to keep a copy of the file being replaced)."""

    def write(fh) -> None:
        writer = None
        try:
            for table in tables:
                if writer is None:  # the first rows decide the float encodings
                    writer = pq.ParquetWriter(fh, schema, **parquet_options(schema, table.slice(0, SAMPLE_ROWS)))
                writer.write_table(table)
            if writer is None:  # no rows: still a file with the schema
                writer = pq.ParquetWriter(fh, schema, **parquet_options(schema))
        finally:
            if writer is not None:
                writer.close()

    return _replace_atomically(path, write, before_rename)


def remove_stale_tmp(root: Path | str) -> int:
    """Delete temporary files left by a killed writer; returns how many were removed."""
    removed = 0
    for tmp in Path(root).rglob(f"{TMP_PREFIX}*"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed
