"""Data-quality checks, evaluated inside the asset that owns them (so they run per partition).

Each check is a spec plus a function of the open connection returning an ``AssetCheckResult``.
Severity ERROR means the day's numbers are wrong (``wattline run`` exits non-zero); WARN means
they are incomplete but sound (a partial day is a normal input).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec

COVERAGE_WARN_BELOW = 0.95
POWER_MAX_TDP_MULTIPLE = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[..., AssetCheckResult]

    def spec(self, asset: str) -> AssetCheckSpec:
        return AssetCheckSpec(name=self.name, asset=asset, description=self.description)


def violations(
    check_name: str,
    rows: list[tuple],
    severity: AssetCheckSeverity,
    description: str | None = None,
    *,
    count_key: str = "violations",
    examples: int = 5,
) -> AssetCheckResult:
    """The common check: passes when the violation query returned no rows, else says how many
    (metadata ``count_key``), shows the first few and gives ``description``."""
    return AssetCheckResult(
        check_name=check_name,
        passed=not rows,
        severity=severity,
        metadata={count_key: len(rows), "examples": str(rows[:examples])},
        description=description if rows else None,
    )


def _scalar(con: duckdb.DuckDBPyConnection, sql: str):
    return con.execute(sql).fetchone()[0]


def no_duplicate_samples(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    dup = _scalar(con, "SELECT coalesce(sum(duplicate_samples), 0) FROM power_1s WHERE date = getvariable('partition_date')")
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
        metadata={"duplicate_samples": int(dup), "files": str(files[:10])},
        description=None if dup == 0 else f"{dup} samples repeat a (host, gpu, source, ts) already seen, in {len(files)} file(s): {', '.join(files[:4])}",
    )


def no_duplicate_files(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    """Byte-identical copies are quarantined (nothing lost): WARN, so they get cleaned up."""
    rows = con.execute(
        """SELECT path, reason FROM quarantined_files
           WHERE dataset = 'power' AND date = getvariable('partition_date')::VARCHAR AND kind = 'duplicate' AND still_quarantined
           ORDER BY path"""
    ).fetchall()
    return AssetCheckResult(
        check_name="no_duplicate_files",
        passed=not rows,
        severity=AssetCheckSeverity.WARN,
        metadata={"duplicate_files": len(rows), "files": str([p for p, _ in rows[:10]])},
        description="; ".join(f"{p}: {why}, quarantined" for p, why in rows[:3]) or None,
    )


def timestamps_inside_partition(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    outside = _scalar(
        con,
        "SELECT count(*) FROM power WHERE date = getvariable('partition_date') AND (ts < day_start() OR ts >= day_end())",
    )
    return AssetCheckResult(
        check_name="timestamps_inside_partition",
        passed=outside == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"rows_outside_day": int(outside)},
    )


def power_within_bounds(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    rows = con.execute(
        f"""
        SELECT p.host, p.gpu, min(p.min_w) AS min_w, max(p.max_w) AS max_w, any_value(i.tdp_w) AS tdp_w
        FROM power_1s p JOIN inventory_gpus i USING (host, gpu)
        WHERE p.date = getvariable('partition_date')
        GROUP BY ALL
        HAVING min(p.min_w) < 0 OR max(p.max_w) > {POWER_MAX_TDP_MULTIPLE} * any_value(i.tdp_w)
        ORDER BY 1, 2
        """
    ).fetchall()
    return violations("power_within_bounds", rows, AssetCheckSeverity.ERROR, f"power outside [0, {POWER_MAX_TDP_MULTIPLE:g} × TDP]", count_key="gpus_out_of_bounds")


def gpu_coverage(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    rows = con.execute(
        """
        SELECT host || '/' || gpu AS gpu, count(*) / 86400.0 AS coverage
        FROM power_1s WHERE date = getvariable('partition_date')
        GROUP BY ALL ORDER BY coverage, gpu
        """
    ).fetchall()
    low = [(g, round(c, 4)) for g, c in rows if c < COVERAGE_WARN_BELOW]
    return AssetCheckResult(
        check_name="gpu_coverage",
        passed=bool(rows) and not low,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "gpus_reporting": len(rows),
            "gpus_below_95pct": len(low),
            "min_coverage": float(rows[0][1]) if rows else 0.0,
            "lowest": str(low[:10]),
        },
        description=None if rows and not low else ("no power samples this day (no usable files under power/date=…)" if not rows else f"{len(low)} GPU(s) cover < 95% of the day"),
    )


def gpus_in_inventory(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    rows = con.execute(
        """
        SELECT DISTINCT p.host, p.gpu FROM power_1s p
        ANTI JOIN inventory_gpus i USING (host, gpu)
        WHERE p.date = getvariable('partition_date') ORDER BY 1, 2
        """
    ).fetchall()
    return violations("gpus_in_inventory", rows, AssetCheckSeverity.WARN, f"{len(rows)} GPU(s) report power but are not in inventory.yaml: left out of host/cluster sums", count_key="unknown_gpus", examples=10)


def files_follow_contract(con, *, rejected_files: dict[str, str], **_) -> AssetCheckResult:
    """Unreadable or drifted files are quarantined; until they are fixed (or their quarantined
    copy deleted to accept the loss) the day misses their data: ERROR."""
    return AssetCheckResult(
        check_name="files_follow_contract",
        passed=not rejected_files,
        severity=AssetCheckSeverity.ERROR,
        metadata={"rejected_files": len(rejected_files), "reasons": str(dict(list(rejected_files.items())[:10]))},
        description="; ".join(f"{p}: {why}" for p, why in list(rejected_files.items())[:3]) or None,
    )


def _converted_check(name: str, files: dict[str, str], what: str) -> AssetCheckResult:
    return AssetCheckResult(
        check_name=name,
        passed=not files,
        severity=AssetCheckSeverity.WARN,
        metadata={"files": len(files), "conversions": str(dict(list(files.items())[:10]))},
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
    absent_only = lambda why: all(part.startswith("absent nullable") for part in why.split("; "))  # noqa: E731
    cast = {p: why for p, why in converted_files.items() if not absent_only(why)}
    return _converted_check("files_accepted_with_casts", cast, "accepted with casts (rewritten in the contract's types, originals kept in quarantine/files/)")


POWER_1S_CHECKS = [
    Check("files_follow_contract", "Every power file of the day reads and follows the data contract (bad files are quarantined and named).", files_follow_contract),
    Check("naive_timestamps_read_as_utc", "No raw file of the day has timestamps without a zone (WARN: they are read as UTC; the files are named).", naive_timestamps_read_as_utc),
    Check("files_accepted_with_casts", "No raw file of the day needed a lossless conversion to the contract (WARN: casts or extra columns, each file named).", files_accepted_with_casts),
    Check("no_duplicate_files", "No power file of the day is a byte-identical copy of another (copies are quarantined).", no_duplicate_files),
    Check("no_duplicate_samples", "No (host, gpu, source, ts) appears twice.", no_duplicate_samples),
    Check("timestamps_inside_partition", "Every sample's ts lies inside its date= partition (UTC).", timestamps_inside_partition),
    Check("power_within_bounds", "Power within [0, 2 × TDP] for every GPU.", power_within_bounds),
    Check("gpu_coverage", "Each reporting GPU covers ≥ 95% of the day's seconds (WARN: partial days are normal).", gpu_coverage),
    Check("gpus_in_inventory", "Every reporting GPU is listed in inventory.yaml.", gpus_in_inventory),
]
