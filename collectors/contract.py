"""The data contract: pyarrow schemas of the raw datasets, enforced wherever a file is written or read.

Every writer of this project (NVML collector, importers, simulator) goes through :func:`conform`,
which is strict. Files written by other tools are judged by :func:`inspect_file` (the pipeline's
quarantine and ``wattline check`` share it): what converts without loss of meaning (another
timestamp unit, a naive timestamp read as UTC, a wider number whose values all fit, an absent
nullable column, an extra column) is accepted and converted by :func:`convert`; genuine drift is
named and rejected instead of silently mis-read. A row whose required value is null (no time, host
or GPU to put it at) is set aside on its own, the file's other rows used; a file over the row
budget (``WATTLINE_MAX_FILE_ROWS``) is rejected from its footer, before it is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collectors.names import inside_key
from collectors.settings import MAX_FILE_ROWS_ENV, load

QUARANTINE_DIR = "quarantine"
"""Folder of the data dir holding rejected files and rows (collectors' and the pipeline's)."""

TS = pa.timestamp("ns", tz="UTC")

POWER_TS = pa.timestamp("us", tz="UTC")
"""Power samples keep microseconds: NVML stamps its readings in µs, and µs deltas between 10 Hz
samples pack into ~1.8 bytes where ns deltas take ~2.9. Files written with ns still read."""

POWER_SOURCES = ("nvml-buffer", "nvml-field", "nvidia-smi", "simulated", "nvml-average", "nvidia-smi-average", "dcgm")
"""Known values of ``power.source``; other strings are allowed (e.g. a site's own importer)."""

SOURCE_RANK = {"nvml-buffer": 1, "nvml-field": 2, "simulated": 2, "nvidia-smi": 3}
"""Preference when one GPU has several instantaneous sources in a period (lower is better).
Sources not listed here (1 s averages) rank last."""

POWER = pa.schema(
    [
        pa.field("ts", POWER_TS, nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("gpu", pa.uint8(), nullable=False),
        pa.field("gpu_uuid", pa.string()),
        pa.field("power_w", pa.float32()),
        pa.field("power_avg_w", pa.float32()),
        pa.field("energy_j", pa.float64()),
        pa.field("sm_clock_mhz", pa.uint16()),
        pa.field("gpu_util_pct", pa.uint8()),
        pa.field("mem_used_mib", pa.uint32()),
        pa.field("temp_c", pa.uint8()),
        pa.field("power_limit_w", pa.float32()),
        pa.field("source", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    ]
)

REQUESTS = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("arrival_ts", TS, nullable=False),
        pa.field("prefill_start_ts", TS),
        pa.field("first_token_ts", TS),
        pa.field("end_ts", TS),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("output_tokens", pa.int32()),
        pa.field("status", pa.string()),
        pa.field("max_tokens", pa.int32()),
        pa.field("replica", pa.string()),
    ]
)
"""``max_tokens``: the output length the client asked for (the request's cap), null where the source
does not say. ``replica``: the id of the replica (engine instance) of the endpoint that served the
request, as the source names it (OTLP ``service.instance.id``), null where it does not. Both were
added after request files were first written: see :data:`ADDED_COLUMNS`."""

ADDED_COLUMNS = {"requests": ("max_tokens", "replica")}
"""Nullable columns added to a dataset's contract after files were written without them: a file
lacking one is as exact as it was (read with it NULL: the raw views read by name), never rewritten
nor logged as converted."""

JOB_EVENTS = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("step", pa.int64()),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("start_ts", TS, nullable=False),
        pa.field("end_ts", TS, nullable=False),
        pa.field("tokens", pa.int64()),
    ]
)

ASSIGNMENTS = pa.schema(
    [
        pa.field("host", pa.string()),
        pa.field("gpu", pa.uint8()),
        pa.field("gpu_uuid", pa.string()),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("from_ts", TS),
        pa.field("to_ts", TS),
        pa.field("source", pa.string(), nullable=False),
    ]
)
"""Which endpoint or job (``kind``, ``name``) held a GPU over [from_ts, to_ts) (a null end: open).
The GPU is (host, gpu) or its UUID; ``source`` says who told (``file``, ``prometheus``). Not
partitioned by date: an assignment spans days (``assignments/*.parquet``)."""
ASSIGNMENTS_DIR = "assignments"

REQUEST_STATUSES = ("ok", "error", "cancelled")


@dataclass(frozen=True)
class Dataset:
    """A raw dataset: its schema, the timestamp column that decides its day, and its hive layout."""

    name: str
    schema: pa.Schema
    time_column: str
    partition_by_host: bool

    def glob(self) -> str:
        return f"{self.name}/date=*/host=*/*.parquet" if self.partition_by_host else f"{self.name}/date=*/*.parquet"

    def _segments(self, date: str, host: str | None) -> list[str]:
        segments = [self.name, f"date={date}"]
        if self.partition_by_host:
            if not host:
                raise ValueError(f"dataset {self.name} is partitioned by host: a host is required")
            segments.append(f"host={host}")
        return segments

    def partition_key(self, date: str, host: str | None = None) -> str:
        """The partition folder relative to the data dir: ``power/date=D/host=H``; a host that
        breaks the path-name rule raises :class:`collectors.names.BadName`."""
        return inside_key(*self._segments(date, host))

    def partition_dir(self, root: Path | str, date: str, host: str | None = None) -> Path:
        return Path(root) / self.partition_key(date, host)  # every segment checked: stays under root


DATASETS = {
    "power": Dataset("power", POWER, "ts", partition_by_host=True),
    "requests": Dataset("requests", REQUESTS, "arrival_ts", partition_by_host=False),
    "job_events": Dataset("job_events", JOB_EVENTS, "start_ts", partition_by_host=False),
}


class SchemaError(ValueError):
    """A table or file does not follow the data contract."""


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_dictionary(expected):
        value = actual.value_type if pa.types.is_dictionary(actual) else actual
        return value in (pa.string(), pa.large_string())
    if pa.types.is_string(expected):
        return actual in (pa.string(), pa.large_string()) or (
            pa.types.is_dictionary(actual) and actual.value_type in (pa.string(), pa.large_string())
        )
    if pa.types.is_timestamp(expected):
        # Any unit: conform() converts it, and readers (DuckDB) take ns and µs files side by side.
        return pa.types.is_timestamp(actual) and actual.tz in UTC_NAMES
    return actual == expected


def schema_problems(actual: pa.Schema, expected: pa.Schema) -> list[str]:
    """Human-readable differences between a schema and the contract (empty when it conforms)."""
    problems = []
    names = set(actual.names)
    added = added_columns(expected)
    for column in expected:
        if column.name not in names:
            if column.name in added:  # a writer older than the column: NULL, see ADDED_COLUMNS
                continue
            problems.append(f"missing column {column.name!r} ({column.type})")
            continue
        got = actual.field(column.name).type
        if not _same_type(got, column.type):
            problems.append(f"column {column.name!r} is {got}, the contract says {column.type}")
    extra = sorted(names - set(expected.names) - {"date", "host"})
    if extra:
        problems.append(f"unexpected column(s) {', '.join(map(repr, extra))}")
    return problems


def conform(table: pa.Table, schema: pa.Schema, where: str = "table") -> pa.Table:
    """Return ``table`` with exactly the contract's columns and types, or raise :class:`SchemaError`.

    Columns must already have the right type (string/large_string and dictionary variants are
    unified, timestamps take the contract's unit); nothing numeric is coerced, so a float written
    as int is reported, not hidden.
    """
    problems = schema_problems(table.schema, schema)
    if problems:
        raise SchemaError(f"{where}: " + "; ".join(problems))
    columns = []
    for column in schema:
        if column.name not in table.column_names:  # an added column (schema_problems let it pass)
            columns.append(pa.nulls(table.num_rows, column.type))
            continue
        col = table.column(column.name)
        if col.type != column.type:
            # Timestamps to a coarser unit truncate (sub-µs digits of a power sample carry nothing).
            col = col.cast(column.type, safe=not pa.types.is_timestamp(column.type))
        if not column.nullable and col.null_count:
            raise SchemaError(f"{where}: column {column.name!r} has {col.null_count} null value(s)")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def check_file_schema(path: Path | str, schema: pa.Schema) -> None:
    """Raise :class:`SchemaError` naming ``path`` if its footer does not match the contract."""
    try:
        actual = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt footer
        raise SchemaError(f"{path}: not a readable Parquet file ({exc})") from exc
    problems = schema_problems(actual, schema)
    if problems:
        raise SchemaError(f"{path}: " + "; ".join(problems))


UTC_NAMES = ("UTC", "+00:00", "Etc/UTC")
FLOAT32_EXACT_INT = 2**24
"""Integers up to this magnitude are exact in float32 (a larger one would lose digits)."""


@dataclass
class Conversion:
    """What reading one file under the contract takes: nothing (exact), lossless conversions
    (each named), or the problems that keep it out (it would be quarantined)."""

    problems: list[str] = field(default_factory=list)
    unreadable: bool = False
    too_large: bool = False
    casts: list[str] = field(default_factory=list)
    naive: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    rows: int = 0
    """Rows in the file (its footer's count)."""
    null_rows: dict[str, int] = field(default_factory=dict)
    """Required column → rows where it is null."""
    rows_set_aside: int = 0
    """Rows with at least one null required value: left out of the rewritten file (the original,
    kept in quarantine, still holds them)."""

    @property
    def usable(self) -> bool:
        return not self.problems

    @property
    def exact(self) -> bool:
        return self.usable and not (self.casts or self.naive or self.absent or self.extra or self.null_rows)

    @property
    def quiet(self) -> bool:
        """Usable with at most absent nullable columns (a minimal exporter's file: nothing to warn
        about, though the pipeline still rewrites it with those columns as NULL)."""
        return self.usable and not (self.casts or self.naive or self.extra or self.null_rows)

    def notes(self) -> list[str]:
        """One phrase per conversion, in the words the checks and ``wattline check`` print."""
        out = [f"naive timestamps read as UTC: {', '.join(map(repr, self.naive))}"] if self.naive else []
        out += self.casts
        if self.absent:
            out.append(f"absent nullable column(s) read as NULL: {', '.join(map(repr, self.absent))}")
        if self.extra:
            out.append(f"extra column(s) ignored: {', '.join(map(repr, self.extra))}")
        if self.null_rows:
            out.append(self.null_note())
        return out

    def null_note(self) -> str:
        counts = ", ".join(f"{name!r} null in {n}" for name, n in self.null_rows.items())
        return f"{self.rows_set_aside} of {self.rows} row(s) {ROWS_SET_ASIDE} ({counts})"


ROWS_SET_ASIDE = "set aside: a required value is null"
"""The words every message about rows left out for a null required value carries (the checks find them by it)."""


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def plan_conversion(actual: pa.Schema, expected: pa.Schema) -> Conversion:
    """Judge a file's schema against the contract (the footer alone; values are checked by
    :func:`convert`). Accepted: any timestamp unit and zone (a naive one is read as UTC),
    integers of another width or sign into an integer column, integers and floats into a float
    column, an absent nullable column, extra columns. Anything else is a problem."""
    plan = Conversion()
    names = set(actual.names)
    added = added_columns(expected)
    for f in expected:
        if f.name not in names:
            if f.name in added:  # a file older than the column: nothing to convert
                continue
            if f.nullable:
                plan.absent.append(f.name)
            else:
                plan.problems.append(f"missing column {f.name!r} ({f.type})")
            continue
        got = actual.field(f.name).type
        if _same_type(got, f.type):
            continue
        if pa.types.is_timestamp(f.type) and pa.types.is_timestamp(got):
            if got.tz is None:
                plan.naive.append(f.name)
            else:  # a zoned timestamp is an instant: only its label changes
                plan.casts.append(f"{f.name!r} {got} → {f.type} (same instant)")
        elif _is_number(f.type) and _is_number(got) and not (pa.types.is_integer(f.type) and pa.types.is_floating(got)):
            plan.casts.append(f"{f.name!r} {got} → {f.type}")
        else:
            plan.problems.append(f"column {f.name!r} is {got}, the contract says {f.type}")
    plan.extra = sorted(names - set(expected.names) - {"date", "host"})
    return plan


def added_columns(schema: pa.Schema) -> set[str]:
    """The columns of :data:`ADDED_COLUMNS` in ``schema``'s dataset (none for another schema)."""
    return {c for ds, cols in ADDED_COLUMNS.items() if DATASETS[ds].schema.equals(schema) for c in cols}


def _cast_values(col: pa.ChunkedArray, to: pa.DataType, name: str) -> pa.ChunkedArray:
    """Cast a numeric column if every value fits ``to`` exactly (floats: to float32's precision),
    else raise :class:`SchemaError` naming the column and the offending range."""
    if col.type == to:
        return col
    bounds = pc.min_max(col)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    if lo is not None:
        if pa.types.is_integer(to):
            info = np.iinfo(to.to_pandas_dtype())
            if lo < info.min or hi > info.max:
                raise SchemaError(f"column {name!r} has values {lo}..{hi}, outside {to} ({info.min}..{info.max})")
        elif to == pa.float32():
            limit = FLOAT32_EXACT_INT if pa.types.is_integer(col.type) else float(np.finfo(np.float32).max)
            finite = [v for v in (lo, hi) if np.isfinite(v)]
            if any(abs(v) > limit for v in finite):
                raise SchemaError(f"column {name!r} has values {lo}..{hi}, beyond what float32 holds exactly")
    return col.cast(to, safe=False)


def convert(table: pa.Table, schema: pa.Schema, where: str = "table") -> tuple[pa.Table, Conversion]:
    """``table`` in the contract's exact columns and types, and what it took; raises
    :class:`SchemaError` for genuine drift (see :func:`plan_conversion`) or values that do not fit.
    Rows with a null in a required column are left out and counted in the plan (``null_rows``,
    ``rows_set_aside``). Timestamps to a coarser unit truncate (power keeps µs)."""
    plan = plan_conversion(table.schema, schema)
    if plan.problems:
        raise SchemaError(f"{where}: " + "; ".join(plan.problems))
    plan.rows = table.num_rows
    columns = []
    missing = None
    for f in schema:
        if f.name in plan.absent or f.name not in table.column_names:  # absent, or added after the file
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        try:
            if pa.types.is_timestamp(f.type):
                if col.type.tz is None:  # the stored value is the UTC wall clock
                    col = col.cast(pa.timestamp(col.type.unit, tz="UTC"))
                col = col.cast(f.type, safe=False)
            elif _is_number(f.type):
                col = _cast_values(col, f.type, f.name)
            elif col.type != f.type:
                col = col.cast(f.type)
        except SchemaError as exc:
            raise SchemaError(f"{where}: {exc}") from exc
        if not f.nullable and col.null_count:
            plan.null_rows[f.name] = col.null_count
            nulls = pc.is_null(col)
            missing = nulls if missing is None else pc.or_(missing, nulls)
        columns.append(col)
    if missing is not None:
        keep = pc.invert(missing)
        plan.rows_set_aside = table.num_rows - pc.sum(keep).as_py()
        columns = [c.filter(keep) for c in columns]
    return pa.Table.from_arrays(columns, schema=schema), plan


BATCH_ROWS = 1 << 20
"""Rows converted at a time when a file is checked or rewritten (memory stays bounded)."""


def row_budget_problem(rows: int, max_rows: int) -> str | None:
    if rows <= max_rows:
        return None
    return (f"{rows:,} rows, over the per-file budget of {max_rows:,} rows ({MAX_FILE_ROWS_ENV} raises it; "
            f"or split the file, e.g. one per hour)")


def _footer_null_counts(meta: pq.FileMetaData, names: list[str]) -> dict[str, int] | None:
    """Null counts of ``names`` from the row groups' statistics; None when a row group lacks them."""
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    counts = dict.fromkeys(names, 0)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for name in names:
            if name not in index:
                return None
            stats = group.column(index[name]).statistics
            if stats is None or not stats.has_null_count:
                return None
            counts[name] += stats.null_count
    return counts


def _merge(plan: Conversion, part: Conversion) -> None:
    for name, n in part.null_rows.items():
        plan.null_rows[name] = plan.null_rows.get(name, 0) + n
    plan.rows_set_aside += part.rows_set_aside


def iter_converted(pf: pq.ParquetFile, schema: pa.Schema, plan: Conversion, where: str = "table") -> Iterator[pa.Table]:
    """The file's rows in the contract's types, :data:`BATCH_ROWS` at a time, rows with a null
    required value left out and counted in ``plan`` (its file-level plan); raises
    :class:`SchemaError` as :func:`convert`."""
    plan.null_rows, plan.rows_set_aside = {}, 0
    present = set(pf.schema_arrow.names)  # an added column (ADDED_COLUMNS) may be missing without being absent
    columns = [f.name for f in schema if f.name not in plan.absent and f.name in present]
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        table, part = convert(pa.Table.from_batches([batch]), schema, where=where)
        _merge(plan, part)
        yield table


def inspect_file(path: Path | str, schema: pa.Schema, max_rows: int | None = None) -> Conversion:
    """How ``path`` reads under the contract; never raises. Exact files cost a footer read (its
    row count against ``max_rows``, default ``WATTLINE_MAX_FILE_ROWS``, and the row groups' null
    counts of the required columns); the others are read a batch at a time (values must fit)."""
    max_rows = load().max_file_rows if max_rows is None else max_rows
    try:
        with pq.ParquetFile(path) as pf:
            return _inspect(pf, schema, max_rows, str(path))
    except Exception as exc:  # pyarrow raises several types for a corrupt footer or page
        return Conversion(problems=[f"not a readable Parquet file ({' '.join(str(exc).split())})"], unreadable=True)


def _inspect(pf: pq.ParquetFile, schema: pa.Schema, max_rows: int, where: str) -> Conversion:
    plan = plan_conversion(pf.schema_arrow, schema)
    plan.rows = pf.metadata.num_rows
    too_many = row_budget_problem(plan.rows, max_rows)
    if too_many:
        plan.problems.insert(0, too_many)
        plan.too_large = True
    if not plan.usable:
        return plan
    if plan.exact:
        required = [f.name for f in schema if not f.nullable]
        counts = _footer_null_counts(pf.metadata, required)
        if counts is not None and not any(counts.values()):
            return plan
    try:
        for _ in iter_converted(pf, schema, plan, where):
            pass
    except SchemaError as exc:
        plan.problems.append(str(exc).removeprefix(f"{where}: "))
    return plan


def epoch_ns(ts: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Nanoseconds since the epoch (int64) of a timestamp column of any unit."""
    return ts.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
