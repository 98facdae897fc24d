"""Raw files the pipeline cannot use are moved out of their dataset into quarantine, with a reason.

Why move them: DuckDB reads a dataset through one glob, so a single unreadable file there fails
every query on the catalog's raw views, and a drifted one (int for float, an extra column) is
silently cast and mixed in. A quarantined file is kept, never deleted:

- ``<data-dir>/quarantine/files/<its path under the data dir>``: the file itself;
- ``<data-dir>/quarantine/file_log/*.parquet``: one row per file (dataset, date, path,
  quarantined_path, kind, reason, bytes, at), queryable as the ``quarantined_files`` view, whose
  ``still_quarantined`` says whether the file is still there.

A day's checks fail while any of its files is still quarantined: fix the file and put it back
(then re-run the day), or delete the quarantined copy to accept the loss. Kinds: ``unreadable``
(truncated footer...), ``schema`` (drifted from the contract), ``too_large`` (more rows than the
per-file budget, ``WATTLINE_MAX_FILE_ROWS``, seen in its footer: never read), ``duplicate`` (a
byte-identical copy of another file of the day: nothing is lost by leaving it out), ``converted``
(not quarantined: see below).

A file written by another tool that converts without loss (``collectors.contract.plan_conversion``:
naive or other-unit timestamps, wider numbers whose values fit, an absent nullable column, an
extra column) is used, not quarantined: it is rewritten in place in the contract's exact types,
so every reader (the pipeline's views, the catalog's glob, ``wattline sql``) sees one schema,
and the original is kept under ``quarantine/files/`` with a ``converted`` log row naming each
conversion. Rows whose required value is null (no time, host or GPU) are left out of the rewrite,
one row at a time: the file's other rows are used, and the kept original still holds them. The
WARN checks ``naive_timestamps_read_as_utc``, ``files_accepted_with_casts`` and
``rows_with_null_required_values`` name such files while their original copy is kept; delete it
once the conversion is understood.

Symbolic links where a dataset's files are looked for (a linked ``host=H`` folder, a linked file)
are never read, moved or rewritten (``pipeline.datadir.raw_files`` does not list what is reached
through one, so nothing here sees them): the checks and ``wattline run`` name them instead.

On an ``s3://`` data dir (``data_dir`` is then its local work dir, pipeline/remote.py) the
object is moved on S3 as well and the log row uploaded, both naming the files by URL, so the
file is not read again and ``quarantined_files`` is the same on every machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.atomic import fsync_dir, write_parquet_atomic, write_parquet_stream_atomic
from collectors.contract import DATASETS, QUARANTINE_DIR, Conversion, SchemaError, inspect_file, iter_converted, plan_conversion
from collectors.days import now_utc
from collectors.settings import load
from pipeline.datadir import quarantine_lock, raw_files
from pipeline.remote import root_for
from pipeline.sqltext import literal, path_literal, pattern_literal

FILES_DIR = "files"
LOG_DIR = "file_log"
LOSSES = ("unreadable", "schema", "too_large")
"""Kinds whose file is left out of the day (a duplicate loses nothing, a converted file is used)."""

LOG_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("date", pa.string()),
        ("path", pa.string()),
        ("quarantined_path", pa.string()),
        ("kind", pa.string()),
        ("reason", pa.string()),
        ("bytes", pa.int64()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)

_verdicts: dict[tuple[str, int, int, str, int], Conversion] = {}
"""Verdicts per (path, size, mtime, dataset, row budget): each asset of a run opens a connection, and a day
can hold thousands of files; a file that changes gets a new key."""


def files_dir(data_dir: Path) -> Path:
    return data_dir / QUARANTINE_DIR / FILES_DIR


def log_dir(data_dir: Path) -> Path:
    return data_dir / QUARANTINE_DIR / LOG_DIR


def _verdict(path: Path, dataset: str, max_rows: int) -> Conversion:
    """How ``path`` reads under the contract (``collectors.contract.inspect_file``, cached) with a
    budget of ``max_rows`` rows."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, dataset, max_rows)
    if key not in _verdicts:
        _verdicts[key] = inspect_file(path, DATASETS[dataset].schema, max_rows)
    return _verdicts[key]


def _problem(verdict: Conversion) -> tuple[str, str]:
    """(kind, one-line reason) of a file that cannot be used."""
    kind = "unreadable" if verdict.unreadable else "too_large" if verdict.too_large else "schema"
    return (kind, " ".join("; ".join(verdict.problems).split()))


_hashes: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    """Content hash, cached like the verdicts (every asset's connection asks again)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def _duplicates(files: list[Path]) -> dict[Path, Path]:
    """Byte-identical copies: {copy: the oldest file (mtime, then name) with the same bytes}.
    Only files of equal size are hashed, so a normal day costs one stat per file."""
    by_size: dict[int, list[Path]] = {}
    for f in files:
        by_size.setdefault(f.stat().st_size, []).append(f)
    copies: dict[Path, Path] = {}
    for group in by_size.values():
        if len(group) < 2:
            continue
        first_with: dict[str, Path] = {}
        for f in sorted(group, key=lambda p: (p.stat().st_mtime_ns, p.name)):
            original = first_with.setdefault(_sha256(f), f)
            if original != f:
                copies[f] = original
    return copies


def usable_files(data_dir: Path, dataset: str, date: str) -> list[Path]:
    """The day's files of ``dataset`` that the pipeline may read (files that convert without
    loss rewritten in the contract's types first); the others are quarantined."""
    with quarantine_lock(data_dir):
        files = raw_files(data_dir, dataset, date)
        max_rows = load().max_file_rows  # once per listing, not per file: every step lists every dataset
        verdicts = {f: _verdict(f, dataset, max_rows) for f in files}
        bad = {f: _problem(v) for f, v in verdicts.items() if not v.usable}
        convertible = {f: v for f, v in verdicts.items() if v.usable and not v.exact}
        if convertible:
            bad.update(_convert(data_dir, dataset, date, convertible))
        good = [f for f in files if f not in bad]
        for copy, original in _duplicates(good).items():
            bad[copy] = ("duplicate", f"byte-identical copy of {original}")
        if bad:
            _quarantine(data_dir, dataset, date, bad)
        return [f for f in good if f not in bad]


def _convert(data_dir: Path, dataset: str, date: str, files: dict[Path, Conversion]) -> dict[Path, tuple[str, str]]:
    """Rewrite each file in the contract's types (one at a time: a day may hold many), its
    original kept in quarantine and a ``converted`` row logged; returns {path: (kind, reason)}
    of those that failed to convert after all (values are checked by the verdict already).

    Order for a crash: log, keep a copy of the original, then rename the rewrite over the file;
    a crash leaves the original in place (converted again next run, a second copy kept). A
    logged row whose original copy was never made is not listed (``entries`` lists present copies)."""
    root = root_for(data_dir)
    now = now_utc()
    keep = {path: _destination(data_dir, path, root) for path in sorted(files)}
    name = (lambda p: root.location(_key(data_dir, p))) if root else str  # noqa: E731
    rows = [
        dict(dataset=dataset, date=date, path=name(p), quarantined_path=name(dest), kind="converted",
             reason="accepted with casts: " + "; ".join(files[p].notes()), bytes=p.stat().st_size, at=now)
        for p, dest in keep.items()
    ]
    log = write_parquet_atomic(pa.Table.from_pylist(rows, schema=LOG_SCHEMA), log_dir(data_dir) / f"{date}-{dataset}-{uuid.uuid4().hex[:12]}.parquet")
    if root is not None:
        root.upload(log, _key(data_dir, log))
    failed = {}
    for path, dest in keep.items():

        def keep_original(path: Path = path, dest: Path = dest) -> None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            with open(dest, "rb") as fh:
                os.fsync(fh.fileno())
            fsync_dir(dest.parent)

        schema = DATASETS[dataset].schema
        try:
            with pq.ParquetFile(path) as pf:
                plan = plan_conversion(pf.schema_arrow, schema)
                batches = iter_converted(pf, schema, plan, where=str(path))
                write_parquet_stream_atomic(batches, schema, path, before_rename=keep_original)
        except (SchemaError, OSError, pa.ArrowException) as exc:
            failed[path] = ("schema", " ".join(str(exc).removeprefix(f"{path}: ").split()))
            continue
        if root is not None:
            root.upload(dest, _key(data_dir, dest))
            root.upload(path, _key(data_dir, path))
    return failed


def quarantine_damaged(data_dir: Path, dataset: str, date: str) -> int:
    """Decode every usable file of the day in full and quarantine those that fail; returns how
    many. The footer check cannot see damaged data pages: this runs only after a query failed."""
    import duckdb

    with quarantine_lock(data_dir):
        bad = {}
        con = duckdb.connect()
        try:
            for f in raw_files(data_dir, dataset, date):
                try:
                    con.sql(f"SELECT * FROM read_parquet({path_literal(f)})").to_arrow_table()
                except duckdb.Error as exc:
                    bad[f] = ("unreadable", "damaged data: " + " ".join(str(exc).split()))
        finally:
            con.close()
        if bad:
            _quarantine(data_dir, dataset, date, bad)
        return len(bad)


def _destination(data_dir: Path, path: Path, root=None) -> Path:
    dest = files_dir(data_dir) / path.relative_to(data_dir)
    taken = dest.exists() or (root is not None and root.exists(_key(data_dir, dest)))
    if taken:  # the same name quarantined before: keep both
        dest = dest.with_name(f"{dest.stem}.{uuid.uuid4().hex[:8]}{dest.suffix}")
    return dest


def _key(data_dir: Path, path: Path) -> str:
    return path.relative_to(data_dir).as_posix()


def _quarantine(data_dir: Path, dataset: str, date: str, bad: dict[Path, tuple[str, str]]) -> None:
    """Log first, then move: a crash in between leaves the file in place (validated again next
    run), never a moved file that no log row names."""
    root = root_for(data_dir)  # an S3 data dir whose work dir this is: move the objects too
    now = now_utc()
    moves = {path: _destination(data_dir, path, root) for path in bad}
    name = (lambda p: root.location(_key(data_dir, p))) if root else str  # noqa: E731
    rows = [
        dict(dataset=dataset, date=date, path=name(p), quarantined_path=name(moves[p]), kind=kind,
             reason=reason, bytes=p.stat().st_size, at=now)
        for p, (kind, reason) in sorted(bad.items())
    ]
    log = write_parquet_atomic(pa.Table.from_pylist(rows, schema=LOG_SCHEMA), log_dir(data_dir) / f"{date}-{dataset}-{uuid.uuid4().hex[:12]}.parquet")
    if root is not None:
        root.upload(log, _key(data_dir, log))
        for src, dest in moves.items():
            with contextlib.suppress(FileNotFoundError):  # moved already by another worker
                root.move(_key(data_dir, src), _key(data_dir, dest))
    for src, dest in moves.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(src, dest)
        except FileNotFoundError:
            if root is None:
                raise
            # On S3 another worker's stage may have dropped the local source once the object
            # moved: fetch the quarantined object, so the file is listed as still quarantined.
            with contextlib.suppress(FileNotFoundError):  # not ours to fetch: moved by another worker
                root.stage([_key(data_dir, dest)], data_dir)
            continue
        fsync_dir(dest.parent)
        fsync_dir(src.parent)


def entries(data_dir: Path, date: str | None = None, dataset: str | None = None, *, present_only: bool = True) -> list[dict]:
    """Quarantine log rows (oldest first), by default only files still in quarantine."""
    folder = log_dir(data_dir)
    if not folder.is_dir():
        return []
    logs = sorted(folder.glob("*.parquet"))
    if not logs:
        return []
    rows = pa.concat_tables(pq.read_table(f, schema=LOG_SCHEMA) for f in logs).sort_by("at").to_pylist()
    return [
        r for r in rows
        if (date is None or r["date"] == date)
        and (dataset is None or r["dataset"] == dataset)
        and (not present_only or _local_copy(data_dir, r["quarantined_path"]).exists())
    ]


_FILES_MARK = f"/{QUARANTINE_DIR}/{FILES_DIR}/"


def _local_copy(data_dir: Path, quarantined_path: str) -> Path:
    """Where a logged quarantined file is on this machine: its place under this data dir's
    ``quarantine/files/`` (the log names the folder the file was quarantined in, which a moved
    or copied data dir, or an S3 data dir's ``s3://`` URL, does not share)."""
    if _FILES_MARK not in quarantined_path:
        return Path(quarantined_path)
    return files_dir(data_dir) / quarantined_path.rsplit(_FILES_MARK, 1)[-1]


def view_sql(data_dir: Path) -> str:
    """Body of the ``quarantined_files`` view (typed and empty when nothing was ever quarantined).

    ``still_quarantined`` compares the part of ``quarantined_path`` after ``/quarantine/files/``
    with this data dir's files, so it holds after the data dir is moved or copied (and for an
    S3 data dir's ``s3://`` rows, against the work dir's local copy)."""
    if not log_dir(data_dir).is_dir() or not any(log_dir(data_dir).glob("*.parquet")):
        cols = ", ".join(f"NULL::{'TIMESTAMPTZ' if f.name == 'at' else 'BIGINT' if f.name == 'bytes' else 'VARCHAR'} AS {f.name}" for f in LOG_SCHEMA)
        return f"SELECT {cols}, NULL::BOOLEAN AS still_quarantined WHERE false"
    prefix = len(str(files_dir(data_dir))) + 2  # 1-based substr after "<files_dir>/"
    present = (f"regexp_extract(l.quarantined_path, {literal('^.*' + _FILES_MARK + '(.+)$')}, 1) IN "
               f"(SELECT substr(file, {prefix}) FROM glob({pattern_literal(files_dir(data_dir), '**')}))")
    return (
        f"SELECT l.*, {present} AS still_quarantined "
        f"FROM read_parquet({pattern_literal(log_dir(data_dir), '*.parquet')}) AS l"
    )
