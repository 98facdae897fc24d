"""Power as series: per GPU per second (`power_1s`) and on the 100 ms grid (`power_100ms`), summed
per host, cluster, role and fleet (`fleet_power_1s`, `fleet_power_100ms`), and each GPU's
cumulative energy at every second (`energy_curve`)."""

from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from dagster import AssetCheckResult, AssetCheckSeverity

from collectors.contract import ROWS_SET_ASIDE
from pipeline import kernels
from pipeline.energy import ENERGY_SCHEMA, energy_seconds
from pipeline.tables import PythonCheck, Table, files_table, table_assets


def _quarantine(context, warehouse, scope) -> dict:
    """The day's files the quarantine holds (named in the log and by the checks below): those that
    lose data (rejected) and those accepted with lossless casts (converted)."""
    rejected = warehouse.rejected_files("power", scope)  # damaged files are found while writing
    for path, why in rejected.items():
        context.log.error(f"in quarantine: {path}: {why}")
    return {"rejected_files": rejected, "converted_files": warehouse.converted_files(scope)}


def _files_headline(con, *, rejected_files: dict, converted_files: dict) -> dict:
    return {"files_rejected": len(rejected_files), "files_converted": len(converted_files)}


def no_duplicate_samples(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    dup = con.execute("SELECT coalesce(sum(duplicate_samples), 0) FROM power_1s WHERE date = getvariable('partition_date')").fetchone()[0]
    files = []
    if dup:  # name the files that repeat samples (re-imported or rewritten data), not just the count
        files = [f for (f,) in con.execute(
            """
            WITH s AS (SELECT filename, host, gpu, source, ts FROM read_parquet(getvariable('files_power'), filename = true)),
            k AS (SELECT host, gpu, source, ts FROM s GROUP BY ALL HAVING count(*) > 1)
            SELECT DISTINCT filename FROM s SEMI JOIN k USING (host, gpu, source, ts) ORDER BY 1
            """
        ).fetchall()]
    return AssetCheckResult(
        check_name="no_duplicate_samples",
        passed=dup == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"duplicate_samples": int(dup), "files": files_table(dict.fromkeys(files, "repeats samples"), "problem")},
        description=None if dup == 0 else f"{dup} samples repeat a (host, gpu, source, ts) already seen, in {len(files)} file(s): {', '.join(files[:4])}",
    )


def files_follow_contract(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    """Unreadable or drifted files are quarantined; until they are fixed (or their quarantined
    copy deleted to accept the loss) the day misses their data: ERROR."""
    return AssetCheckResult(
        check_name="files_follow_contract",
        passed=not rejected_files,
        severity=AssetCheckSeverity.ERROR,
        metadata={"rejected_files": len(rejected_files), "reasons": files_table(rejected_files, "reason")},
        description="; ".join(f"{p}: {why}" for p, why in list(rejected_files.items())[:3]) or None,
    )


def _converted_check(name: str, files: dict[str, str], what: str) -> AssetCheckResult:
    return AssetCheckResult(
        check_name=name,
        passed=not files,
        severity=AssetCheckSeverity.WARN,
        metadata={"files": len(files), "conversions": files_table(files, "conversion")},
        description=(f"{len(files)} file(s) {what}: " + "; ".join(f"{p}: {why}" for p, why in list(files.items())[:3])) if files else None,
    )


def naive_timestamps_read_as_utc(con, *, converted_files: dict[str, str], **_) -> AssetCheckResult:
    """A file whose timestamps carry no zone is read as UTC (what pandas, polars and DuckDB's
    TIMESTAMP write): WARN naming it, so a log written in local time is noticed (convert those
    with ``wattline import nvidia-smi --tz``, or write zoned timestamps)."""
    naive = {p: why for p, why in converted_files.items() if "naive timestamps read as UTC" in why}
    return _converted_check("naive_timestamps_read_as_utc", naive, "with naive timestamps, read as UTC (if they were local time, the day is shifted)")


def files_accepted_with_casts(con, *, converted_files: dict[str, str], **_) -> AssetCheckResult:
    """Files converted without loss (other types whose values fit, extra columns ignored) are
    used; WARN naming each file and its conversions. A file that only lacks nullable columns
    (a minimal exporter) is not named: reading those as NULL is the contract."""
    quiet = lambda part: part.startswith("absent nullable") or ROWS_SET_ASIDE in part  # noqa: E731
    cast = {p: why for p, why in converted_files.items() if not all(quiet(part) for part in why.split("; "))}
    return _converted_check("files_accepted_with_casts", cast, "accepted with casts (rewritten in the contract's types, originals kept in quarantine/files/)")


def rows_with_null_required_values(con, *, converted_files: dict[str, str], **_) -> AssetCheckResult:
    """Rows with no time, host, GPU (power) or other required value cannot be placed: each is left
    out on its own, the rest of its file used, the original file kept in quarantine/files/. WARN
    (the day is incomplete but its numbers sound), naming each file and the null columns, while
    the original is kept; delete it to accept the loss."""
    dropped = {p: next(part for part in why.split("; ") if ROWS_SET_ASIDE in part)
               for p, why in converted_files.items() if ROWS_SET_ASIDE in why}
    return _converted_check("rows_with_null_required_values", dropped, "with rows left out (originals kept in quarantine/files/)")


POWER_1S_PYTHON_CHECKS = (
    # The quarantine's file lists (only the resource knows them) and a raw-file scan run only when
    # duplicates exist: hooks, not SQL files (sql/power_1s/checks/ holds the rest).
    PythonCheck(
        "files_follow_contract",
        "Every power file of the day reads and follows the data contract (bad files are quarantined and named).",
        files_follow_contract,
    ),
    PythonCheck(
        "naive_timestamps_read_as_utc",
        "No raw file of the day has timestamps without a zone (WARN: they are read as UTC; the files are named).",
        naive_timestamps_read_as_utc,
    ),
    PythonCheck(
        "files_accepted_with_casts",
        "No raw file of the day needed a lossless conversion to the contract (WARN: casts or extra columns, each file named).",
        files_accepted_with_casts,
    ),
    PythonCheck(
        "rows_with_null_required_values",
        "No raw row of the day has a null required value (WARN: such rows are left out one by one, the files named).",
        rows_with_null_required_values,
    ),
    PythonCheck("no_duplicate_samples", "No (host, gpu, source, ts) appears twice.", no_duplicate_samples),
)


_SECONDS_SCHEMA = pa.schema([
    ("host", pa.dictionary(pa.int32(), pa.string())), ("gpu", pa.uint8()), ("ts", pa.timestamp("us", tz="UTC")),
    ("mean_w", pa.float32()), ("min_w", pa.float32()), ("max_w", pa.float32()), ("energy_j", pa.float64()),
    ("samples", pa.int32()), ("gap_before", pa.bool_()), ("duplicate_samples", pa.int32()),
    ("source", pa.dictionary(pa.int32(), pa.string())), ("is_average", pa.bool_()),
])


def _seconds_batches(cur, hosts: dict[str, list[str]]) -> Iterator[pa.RecordBatch]:
    """power_1s's rows, one GPU at a time, sorted by (host, gpu, ts)."""
    for host, names in hosts.items():
        source_names = pa.array(["", *names], pa.string())  # list_position counts from 1
        for g, x in _host_samples(cur, _CURVE_SAMPLES, host, names):
            c = kernels.seconds_1s(x["t_ns"], x["power_w"], x["source_rank"])
            n = len(c["second"])
            yield pa.record_batch({
                "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([host])),
                "gpu": pa.array(np.full(n, g, np.uint8)),
                "ts": pa.array(c["second"] * 1_000_000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "mean_w": c["mean_w"].astype(np.float32),
                "min_w": c["min_w"],
                "max_w": c["max_w"],
                "energy_j": c["energy_j"],
                "samples": c["samples"].astype(np.int32),
                "gap_before": c["gap_before"],
                "duplicate_samples": c["duplicate_samples"].astype(np.int32),
                "source": pa.DictionaryArray.from_arrays(x["source_id"][c["first"]].astype(np.int32), source_names),
                "is_average": c["is_average"],
            }, schema=_SECONDS_SCHEMA)


def seconds_by_gpu(con, write) -> int:
    """power_1s's write: sql/power_1s/power_1s.sql as a numpy kernel (kernels.seconds_1s)."""
    return _write_streamed(con, write, "power_1s", _SECONDS_SCHEMA, _seconds_batches)


POWER_1S = Table(
    "power_1s",
    "Per GPU per second: mean, min, max power (W), trapezoid energy (J), samples, gap flag. Built "
    "from each GPU's best source per minute (nvml-buffer > nvml-field > nvidia-smi instant > 1 s "
    "average); files that break the contract are quarantined and named by a check.",
    "cluster-day",
    deps=["power"],
    inputs=_quarantine,
    python_checks=POWER_1S_PYTHON_CHECKS,
    python_headline=_files_headline,
    write=seconds_by_gpu,
)
(power_1s,) = table_assets(POWER_1S)

FLEET_POWER_1S = Table(
    "fleet_power_1s",
    "Per second, summed power (W) and energy (J) of every host, cluster, role and fleet, with "
    "provisioned power, % of provisioned and how many of the domain's GPUs reported.",
    "cluster-day",
    deps=["power_1s"],
    rollup=True,  # role and fleet rows summed from the cluster-days' parts (rollup.sql)
    rollup_deps=["fleet_power_1s"],
)
fleet_power_1s, fleet_fleet_power_1s = table_assets(FLEET_POWER_1S)

_CURVE_SAMPLES = """
SELECT gpu, t_ns, power_w, is_average, list_position($sources, source)::UTINYINT AS source_id
FROM power_day_samples WHERE host = $host
"""

def _host_samples(cur, sql: str, host: str, names: list[str]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """One host's raw samples (``sql``: columns gpu, is_average, source_id = position in ``names``
    and others), per GPU, with ``source_rank`` (view power_day's source_rank macro) looked up per
    source id: the macro's string CASE on every sample cost ~1 s CPU a read at 8 GPU-days."""
    ranks = np.zeros(len(names) + 1, np.uint8)  # list_position counts from 1
    for i, name in enumerate(names, 1):
        ranks[i] = cur.execute("SELECT source_rank(?, false)", [name]).fetchall()[0][0]
    for g, x in _host_by_gpu(cur, sql, {"host": host, "sources": names}):
        x["source_rank"] = np.where(x.pop("is_average"), np.uint8(9), ranks[x["source_id"]])
        yield g, x


def _host_by_gpu(cur, sql: str, params: dict) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """One host's rows of ``sql`` (a ``gpu`` column and others), per GPU in gpu order, as numpy
    arrays. Read in Arrow batches and split by GPU as they come, so memory holds the host's
    rows once, in their narrow types (not DuckDB's result and a copy); a GPU's arrays are freed
    once the caller has its next. Runs of one GPU (files sorted by gpu, as the collector and
    the importers write them) are sliced, not sorted (~2 s CPU less a read at 8 GPU-days)."""
    parts: dict[int, list[dict[str, np.ndarray]]] = {}
    for batch in cur.sql(sql, params=params).to_arrow_reader(1 << 20):
        cols = {name: batch.column(i).to_numpy(zero_copy_only=False) for i, name in enumerate(batch.schema.names)}
        gpu = cols["gpu"]
        bounds = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1], True])
        if len(bounds) <= 64:  # runs of one GPU (files sorted by gpu, read in file order): slices
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                parts.setdefault(int(gpu[lo]), []).append({k: v[lo:hi] for k, v in cols.items() if k != "gpu"})
            continue
        order = np.argsort(gpu, kind="stable")
        gpu = gpu[order]
        bounds = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1], True])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            rows = order[lo:hi]
            parts.setdefault(int(gpu[lo]), []).append({k: v[rows] for k, v in cols.items() if k != "gpu"})
    for g in sorted(parts):
        chunks = parts.pop(g)
        yield g, {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
        del chunks


def _curve_batches(cur, hosts: dict[str, list[str]]) -> Iterator[pa.RecordBatch]:
    """energy_curve's rows, one GPU at a time, sorted by (host, gpu, t_ns): each host's samples
    read once (only the columns the curve needs, ~15 bytes a sample), each GPU's seconds by
    energy.energy_seconds."""
    for host, names in hosts.items():
        for g, x in _host_samples(cur, _CURVE_SAMPLES, host, names):
            yield energy_seconds(x["t_ns"], x["power_w"], x["source_rank"], host, g)


def _day_sources(con) -> dict[str, list[str]]:
    """Each host of the day with the power sources it reports, sorted."""
    hosts: dict[str, list[str]] = {}
    for host, source in con.execute(
        "SELECT DISTINCT host, source::VARCHAR FROM power WHERE date = getvariable('partition_date') ORDER BY 1, 2"
    ).fetchall():
        hosts.setdefault(host, []).append(source)
    return hosts


def _write_streamed(con, write, name: str, schema: pa.Schema, batches: Callable[[Any, dict[str, list[str]]], Iterator[pa.RecordBatch]]) -> int:
    """Write a table whose rows a numpy kernel computes one GPU at a time: the kernel's batches
    stream into the warehouse's write (memory: one host's samples, not the cluster-day's). The
    samples are read on a second connection to the same database (the first is busy with the
    write's COPY), with the same variables. A raw file with damaged data pages fails the read: the
    warehouse quarantines it and runs the write again, which finds the stream spent; the whole
    write then runs once more, over the views the quarantine redefined."""
    try:
        return _write_stream_once(con, write, name, schema, batches)
    except (duckdb.Error, kernels.SpentStream):
        return _write_stream_once(con, write, name, schema, batches)


def _write_stream_once(con, write, name: str, schema: pa.Schema, batches: Callable[[Any, dict[str, list[str]]], Iterator[pa.RecordBatch]]) -> int:
    cur = kernels.second_connection(con)
    try:
        return kernels.write_stream(con, write, name, schema, batches(cur, _day_sources(con)))
    finally:
        cur.close()


def curve_by_gpu(con, write) -> int:
    """energy_curve's write: one row per GPU-second (pipeline/energy.py), not per sample."""
    return _write_streamed(con, write, "energy_curve", ENERGY_SCHEMA, _curve_batches)


_GRID_SAMPLES = """
SELECT gpu, t_ns, power_w, coalesce(power_avg_w, 0) AS power_avg_w, power_avg_w IS NOT NULL AS has_avg, is_average,
       list_position($sources, source)::UTINYINT AS source_id
FROM power_day_samples WHERE host = $host
"""

_GRID_SCHEMA = pa.schema([
    ("host", pa.dictionary(pa.int32(), pa.string())), ("gpu", pa.uint8()), ("ts", pa.timestamp("us", tz="UTC")),
    ("power_w", pa.float32()), ("samples", pa.int32()), ("source", pa.dictionary(pa.int32(), pa.string())),
    ("power_avg_w", pa.float32()), ("is_average", pa.bool_()),
])


def _grid_batches(cur, hosts: dict[str, list[str]]) -> Iterator[pa.RecordBatch]:
    """power_100ms's rows, one GPU at a time, sorted by (host, gpu, ts)."""
    for host, names in hosts.items():
        source_names = pa.array(["", *names], pa.string())  # list_position counts from 1
        for g, x in _host_samples(cur, _GRID_SAMPLES, host, names):
            c = kernels.grid_100ms(x["t_ns"], x["power_w"], x["power_avg_w"], x["has_avg"], x["source_rank"])
            n = len(c["slot"])
            yield pa.record_batch({
                "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([host])),
                "gpu": pa.array(np.full(n, g, np.uint8)),
                "ts": pa.array(c["slot"] * (kernels.SLOT_NS // 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "power_w": c["power_w"].astype(np.float32),
                "samples": c["samples"].astype(np.int32),
                "source": pa.DictionaryArray.from_arrays(x["source_id"][c["first"]].astype(np.int32), source_names),
                "power_avg_w": pa.array(c["power_avg_w"].astype(np.float32), mask=c["avg_null"]),
                "is_average": c["is_average"],
            }, schema=_GRID_SCHEMA)


def grid_by_gpu(con, write) -> int:
    """power_100ms's write: sql/power_100ms/power_100ms.sql as a numpy kernel (kernels.grid_100ms)."""
    return _write_streamed(con, write, "power_100ms", _GRID_SCHEMA, _grid_batches)


ENERGY_CURVE = Table(
    "energy_curve",
    "Per GPU and second: cumulative energy (J) since the day's first sample at the second's start "
    "and end, and the power there, so the energy of any interval is E(b) − E(a) with the samples of "
    "the two seconds (macro energy_between).",
    "cluster-day",
    deps=["power", "power_1s"],
    write=curve_by_gpu,
)
(energy_curve,) = table_assets(ENERGY_CURVE)

POWER_100MS = Table(
    "power_100ms",
    "Per GPU and 100 ms slot: mean best-source power (W), the driver's 1 s average (W, if any), "
    "sample count, source, and whether that source is itself a 1 s average. The grid the "
    "host-and-above swings, correlation and the phase timeline start from.",
    "cluster-day",
    deps=["power", "power_1s"],
    write=grid_by_gpu,
)
(power_100ms,) = table_assets(POWER_100MS)

FLEET_POWER_100MS = Table(
    "fleet_power_100ms",
    "Per 100 ms slot, summed power (W) of every host, cluster, role and fleet, the driver's 1 s "
    "average summed likewise, GPUs reporting, whether the slot is complete in each series (every "
    "reporting GPU has an instantaneous value / a 1 s average, own or carried) and how far the "
    "oldest value was carried (ms).",
    "cluster-day",
    deps=["power_100ms", "fleet_power_1s"],
    rollup=True,  # role and fleet rows summed from the cluster-days' parts; complete when every part is
    rollup_deps=["fleet_power_100ms", ["fleet", "fleet_power_1s"]],
)
fleet_power_100ms, fleet_fleet_power_100ms = table_assets(FLEET_POWER_100MS)
