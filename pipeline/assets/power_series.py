"""Power as series: per GPU per second (`power_1s`) and on the 100 ms grid (`power_100ms`), summed
per host, cluster, role and fleet (`fleet_power_1s`, `fleet_power_100ms`), and each GPU's
cumulative energy at every second (`energy_curve`). The per-GPU tables are series tables: their
rows come from pipeline/series/ (one read of the samples for all three); declared here are their
assets, checks and headlines."""

from dagster import AssetCheckResult, AssetCheckSeverity

from collectors.contract import ROWS_SET_ASIDE
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
    series=True,  # pipeline/series/registry.py: power_1s_rows
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

ENERGY_CURVE = Table(
    "energy_curve",
    "Per GPU and second: cumulative energy (J) since the day's first sample at the second's start "
    "and end, and the power there, so the energy of any interval is E(b) − E(a) with the samples of "
    "the two seconds (macro energy_between).",
    "cluster-day",
    deps=["power", "power_1s"],
    series=True,  # pipeline/series/registry.py: energy_curve_rows
)
(energy_curve,) = table_assets(ENERGY_CURVE)

POWER_100MS = Table(
    "power_100ms",
    "Per GPU and 100 ms slot: mean best-source power (W), the driver's 1 s average (W, if any), "
    "sample count, source, and whether that source is itself a 1 s average. The grid the "
    "host-and-above swings, correlation and the phase timeline start from.",
    "cluster-day",
    deps=["power", "power_1s"],
    series=True,  # pipeline/series/registry.py: power_100ms_rows
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
    one_thread=True,  # 8 GPUs x 24 h: 110-155 MB less at its peak, 0.6 s less CPU
)
fleet_power_100ms, fleet_fleet_power_100ms = table_assets(FLEET_POWER_100MS)
