"""The data contract: pyarrow schemas of the raw datasets, enforced wherever a file is written or read.

Every writer (NVML collector, importers, simulator) goes through :func:`conform`, and the
pipeline checks each file it reads with :func:`check_file_schema`, so a file that drifted
from the contract is named and rejected instead of silently mis-read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.names import inside_key

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
    ]
)

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
        return pa.types.is_timestamp(actual) and actual.tz in ("UTC", "+00:00", "Etc/UTC")
    return actual == expected


def schema_problems(actual: pa.Schema, expected: pa.Schema) -> list[str]:
    """Human-readable differences between a schema and the contract (empty when it conforms)."""
    problems = []
    names = set(actual.names)
    for field in expected:
        if field.name not in names:
            problems.append(f"missing column {field.name!r} ({field.type})")
            continue
        got = actual.field(field.name).type
        if not _same_type(got, field.type):
            problems.append(f"column {field.name!r} is {got}, the contract says {field.type}")
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
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            # Timestamps to a coarser unit truncate (sub-µs digits of a power sample carry nothing).
            col = col.cast(field.type, safe=not pa.types.is_timestamp(field.type))
        if not field.nullable and col.null_count:
            raise SchemaError(f"{where}: column {field.name!r} has {col.null_count} null value(s)")
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


def epoch_ns(ts: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Nanoseconds since the epoch (int64) of a timestamp column of any unit."""
    return ts.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
