"""One pass over a day's samples for every series table.

For each host of the day, the samples are read once, in file order, only the columns the tables
need (~20 bytes a sample), in Arrow batches of ``BATCH_ROWS`` split by GPU as they come (a host's
GPUs interleave in its files); each GPU's samples go through every table's function, and each
table's rows stream into its own part with ``pyarrow.parquet.ParquetWriter``. Memory: one host's
samples in their narrow types, plus one GPU's rows of each table.
"""

from __future__ import annotations

import datetime as dt
import functools
import mmap
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import process_memory
from pipeline.constants import PART_PAGE_ROWS as PAGE_ROWS
from pipeline.row_groups import RowGroups, write_group
from pipeline.series.cache import CurveCache
from pipeline.series.samples import AVERAGE_RANK, GpuSamples, SampleSource
from pipeline.series.table import SeriesTable

BATCH_ROWS = 1 << 20
PASS_KEY = "wattline.series_pass"
"""Parquet key-value metadata of every part: the id of the engine pass that wrote it (parts of one
pass come from one read of the same samples)."""

_SAMPLES = """
SELECT gpu, t_ns, power_w, coalesce(power_avg_w, 0) AS power_avg_w, (power_avg_w IS NOT NULL)::UTINYINT AS has_avg,
       is_average::UTINYINT AS is_average, (list_position($sources, source) - 1)::UTINYINT AS source_id
FROM power_day_samples WHERE host = $host
"""
"""The flags (has_avg, is_average) come as 0 / 1 bytes, viewed as numpy bools: no conversion (Arrow's
booleans are bits, unpacked to bytes at each hand-over)."""


def day_sources(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Each host of the partition day with the power sources it reports, sorted. The hosts first,
    then each host's sources (host_sources): a DISTINCT over the host column alone, then over
    one host's source column, costs less than one over both (8 GPUs x 24 h of capture 4: 0.19
    s CPU against 0.40)."""
    hosts = con.execute("SELECT DISTINCT host FROM power WHERE date = getvariable('partition_date') ORDER BY 1").fetchall()
    return {host: host_sources(con, host) for (host,) in hosts}


class _GpuChunks:
    """Each GPU's chunks of one host's rows, in read order: held in memory as Arrow record batches
    (slices of the read's batches: no conversion until a GPU is handed out), or, with a spill
    folder, each column's values appended to a file of the GPU's there and mapped back straight
    into one numpy array a column (no Arrow table in between: its 100 MB a GPU-day would linger
    in Arrow's allocator while the kernels run), so memory holds one chunk while the host is read
    and one GPU's rows after (not the host's). Spilled columns are numbers without nulls (the
    samples' query makes them so)."""

    def __init__(self, spill_dir: Path | None) -> None:
        self.spill_dir = spill_dir
        self.held: dict[int, list[pa.RecordBatch]] = {}
        self.files: dict[int, list[BinaryIO]] = {}
        self.dtypes: dict[str, np.dtype] = {}

    def add(self, gpu: int, batch: pa.RecordBatch) -> None:
        if self.spill_dir is None:
            self.held.setdefault(gpu, []).append(batch)
            return
        if not self.dtypes:
            for f in batch.schema:
                if not (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
                    raise TypeError(f"spilled column {f.name} is {f.type}, not a number")
                self.dtypes[f.name] = np.dtype(f.type.to_pandas_dtype())
        if gpu not in self.files:
            self.files[gpu] = [open(self._path(gpu, name), "wb") for name in self.dtypes]  # noqa: SIM115 (closed in gpus)
        for fh, column in zip(self.files[gpu], batch.columns, strict=True):
            if column.null_count:
                raise ValueError("a spilled column holds nulls")
            fh.write(column.to_numpy())

    def _path(self, gpu: int, name: str) -> Path:
        assert self.spill_dir is not None
        return self.spill_dir / f"gpu-{gpu}-{name}.bin"

    def gpus(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        for g in sorted(self.held):
            table = pa.Table.from_batches(self.held.pop(g))
            yield g, _arrays(table)
            del table
        for files in self.files.values():
            for fh in files:
                fh.close()
        for g in sorted(self.files):
            del self.files[g]
            x = {name: _mapped(self._path(g, name), dtype) for name, dtype in self.dtypes.items()}
            yield g, x
            del x


def _mapped(path: Path, dtype: np.dtype) -> np.ndarray:
    """A spilled column as a read-only array over the file's pages, the file unlinked: the kernels
    read the pages the write left in the page cache (a copy into a fresh array, each of its pages
    zeroed first, cost more: ~7 ms a 100 MB column), and the pages go when the array does."""
    try:
        if not path.stat().st_size:  # mmap maps no empty file
            return np.empty(0, dtype)
        with open(path, "rb") as fh:
            return np.frombuffer(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), dtype)
    finally:
        path.unlink()


def _arrays(table: pa.Table) -> dict[str, np.ndarray]:
    """One GPU's columns as numpy arrays (one copy where its chunks are joined)."""
    return {name: table.column(name).combine_chunks().to_numpy(zero_copy_only=False) for name in table.column_names}


def host_by_gpu(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict, spill_dir: Path | None = None
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """One host's rows of ``sql`` (a ``gpu`` column and others), per GPU in gpu order, as numpy
    arrays in read order. Read in Arrow batches of BATCH_ROWS and split by GPU as they come (a
    host's GPUs interleave in its files); with ``spill_dir`` each GPU's rows wait in files there
    (one a column; memory: one batch, then one GPU), else in memory (the host's rows in their narrow types).
    Runs of one GPU (files sorted by gpu, as the collector and the importers write them) are
    sliced, not sorted (~2 s CPU less a read at 8 GPU-days)."""
    yield from _read_by_gpu(con, sql, params, spill_dir).gpus()


def _read_by_gpu(con: duckdb.DuckDBPyConnection, sql: str, params: dict, spill_dir: Path | None) -> _GpuChunks:
    """host_by_gpu's read: every row of ``sql`` into its GPU's chunks (the result fully read on
    return, so ``con`` is free for other statements while the GPUs are handed out)."""
    parts = _GpuChunks(spill_dir)
    for batch in con.sql(sql, params=params).to_arrow_reader(BATCH_ROWS):
        at = batch.schema.get_field_index("gpu")
        gpu = batch.column(at).to_numpy(zero_copy_only=False)
        rest = batch.drop_columns(["gpu"])
        bounds = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1], True])
        if len(bounds) <= 64:  # runs of one GPU: slices
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                parts.add(int(gpu[lo]), rest.slice(lo, hi - lo))
            continue
        order = np.argsort(gpu, kind="stable")
        gpu = gpu[order]
        bounds = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1], True])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            parts.add(int(gpu[lo]), rest.take(pa.array(order[lo:hi])))
    return parts


def host_sources(con: duckdb.DuckDBPyConnection, host: str) -> list[str]:
    """The power sources ``host`` reports on the partition day, sorted (GpuSamples.sources)."""
    return [n for (n,) in con.execute(
        "SELECT DISTINCT source::VARCHAR FROM power WHERE date = getvariable('partition_date') AND host = ? ORDER BY 1", [host]
    ).fetchall()]


def _spill_folder() -> tempfile.TemporaryDirectory:
    """An empty folder of the system's temporary files (``TMPDIR``) for host_samples' per-GPU
    files. Not DuckDB's temp_directory: with the folder there, phase_intervals' token sums came
    out different in the last bit on a simulated day (367 of 32,963 rows), in the system's folder
    identical to reads per GPU."""
    return tempfile.TemporaryDirectory(prefix="wattline-samples-")


def host_samples(
    con: duckdb.DuckDBPyConnection, host: str, gpus: Sequence[int] | None = None, *,
    sources: Sequence[str] | None = None, spill_dir: Path | None = None, spill: bool = True,
) -> Iterator[GpuSamples]:
    """One host's samples of the partition day (view power_day_samples), GPU by GPU in gpu order,
    from one read of the host's files in file order: the one reader of raw samples for every
    per-GPU consumer. ``gpus``: only these GPUs (the others are not read). Each GPU's rows wait
    in files of their own while the host is read (in ``spill_dir``, else a temporary folder of
    the system's; ``spill=False`` holds them in memory), so memory holds one
    GPU's samples, not the host's. A GPU without samples is not yielded."""
    names = list(sources) if sources is not None else host_sources(con, host)
    if not names:
        return
    sql = _SAMPLES
    if gpus is not None:
        if not len(gpus):
            return
        sql += " AND gpu IN (" + ", ".join(str(int(g)) for g in gpus) + ")"
    ranks = np.array([SampleSource.of(n, False).rank for n in names], np.uint8)
    folder = _spill_folder() if spill and spill_dir is None else None
    try:
        where = Path(folder.name) if folder is not None else (spill_dir if spill else None)
        kept = con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0]
        con.execute("SET preserve_insertion_order = true")
        try:
            parts = _read_by_gpu(con, sql, {"host": host, "sources": names}, where)
        finally:  # the caller's setting back: its later statements' order (and float sums) as before
            con.execute(f"SET preserve_insertion_order = {'true' if kept else 'false'}")
        for g, x in parts.gpus():
            is_average = x["is_average"].view(np.bool_)
            yield GpuSamples(
                host=host, gpu=g, sources=tuple(names), t_ns=x["t_ns"], power_w=x["power_w"],
                power_avg_w=x["power_avg_w"], has_avg=x["has_avg"].view(np.bool_), is_average=is_average,
                source_id=x["source_id"], source_rank=np.where(is_average, np.uint8(AVERAGE_RANK), ranks[x["source_id"]]),
            )
            del x, is_average  # before the next GPU's rows are read: one GPU's samples alive
    finally:
        if folder is not None:
            folder.cleanup()


def day_samples(con: duckdb.DuckDBPyConnection, spill_dir: Path | None = None) -> Iterator[GpuSamples]:
    """Every GPU's samples of the partition day (view power_day_samples), host by host, GPU by
    GPU, each host's rows read once (host_samples; ``spill_dir``: see host_by_gpu, None holds a
    host's rows in memory). ``con`` reads in file order meanwhile (a GPU's samples then come as
    its files hold them, whatever the thread count)."""
    for host, names in day_sources(con).items():
        yield from host_samples(con, host, sources=names, spill_dir=spill_dir, spill=spill_dir is not None)


def _with_date(batch: pa.RecordBatch, table: SeriesTable, days: int) -> pa.RecordBatch:
    n = batch.num_rows
    date = pa.Array.from_buffers(pa.date32(), n, [None, pa.py_buffer(np.full(n, days, np.int32))])
    return pa.RecordBatch.from_arrays([date, *batch.columns], schema=table.stored_schema)


def write_parts(
    con: duckdb.DuckDBPyConnection, tables: Sequence[SeriesTable], paths: dict[str, Path], date: str, spill_dir: Path | None = None,
    cache: CurveCache | None = None,
) -> dict[str, int]:
    """Compute ``tables`` for the partition day of ``con`` in one pass over its samples; write
    each to ``paths[name]`` (zstd Parquet, sorted by host, gpu, time, the pass's id under
    PASS_KEY). With ``spill_dir`` (an empty folder) each GPU's samples wait there while its host
    is read (memory: one GPU's samples, not its host's). With ``cache``, each GPU's curve is left
    there too and the cache sealed at the end (for the run's later readers: pipeline/series/cache.py).
    Returns rows per table. On any error no file is left behind (the cache unsealed)."""
    pass_id = uuid.uuid4().hex
    days = (dt.date.fromisoformat(date) - dt.date(1970, 1, 1)).days
    writers: dict[str, pq.ParquetWriter] = {}
    try:
        for t in tables:
            # store_schema=False: host and source read back as strings, as DuckDB wrote them
            writers[t.name] = pq.ParquetWriter(paths[t.name], t.stored_schema, compression="zstd", store_schema=False,
                                              max_rows_per_page=PAGE_ROWS, **dict(t.parquet_options))
        with process_memory.reused_heap():
            rows = _write_gpus(con, tables, spill_dir, cache, writers, days)
        for t in tables:
            writers[t.name].add_key_value_metadata({PASS_KEY: pass_id})
            writers[t.name].close()
        if cache is not None:
            cache.seal()
    except BaseException:
        for name, w in writers.items():
            try:
                w.close()
            finally:
                Path(paths[name]).unlink(missing_ok=True)
        raise
    return rows


def _write_gpus(
    con: duckdb.DuckDBPyConnection, tables: Sequence[SeriesTable], spill_dir: Path | None, cache: CurveCache | None,
    writers: dict[str, pq.ParquetWriter], days: int,
) -> dict[str, int]:
    """write_parts' pass over the samples, GPU by GPU: every table's rows into its writer, each
    GPU's curve into ``cache``; returns rows per table."""
    rows = {t.name: 0 for t in tables}
    # full row groups across GPUs, not one a GPU
    groups = {t.name: RowGroups(t.stored_schema, functools.partial(write_group, writers[t.name])) for t in tables}
    for samples in day_samples(con, spill_dir):
        for t in tables:
            batch = t.rows(samples)
            if batch.num_rows:
                groups[t.name].add(_with_date(batch, t, days))
                rows[t.name] += batch.num_rows
        if cache is not None:
            cache.put(samples)
        del samples  # its rows, curve and best rows gone before the next GPU's are read
    for g in groups.values():
        g.finish()
    return rows
