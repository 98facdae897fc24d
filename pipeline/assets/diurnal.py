"""How load follows the day: `hourly_activity` reduces each day to 24 rows per role and endpoint;
`diurnal_profile` reads the trailing weeks of it and profiles power, requests, tokens and J per
output token by local hour (and day of week once 7 days exist)."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, AssetKey, Config, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource

TRAILING_DAYS = 28


def _hours_in_day(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT entity, hour_utc, seconds FROM hourly_activity
           WHERE date = getvariable('partition_date') AND (hour_utc NOT BETWEEN 0 AND 23 OR seconds > 3600)"""
    ).fetchall()
    return violations("hours_valid", rows, AssetCheckSeverity.ERROR)


HOURLY_CHECKS = [Check("hours_valid", "Hours within 0–23 with at most 3,600 seconds each (ERROR).", _hours_in_day)]


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_1s", "fleet_power_1s", "requests"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("hourly_activity") for c in HOURLY_CHECKS],
)
def hourly_activity(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per role, inference endpoint and UTC hour: complete seconds, summed power, energy (J),
    a 1 s power histogram (bins of 0.1% of provisioned), requests, prompt and output tokens."""
    return materialize(context, warehouse, "hourly_activity", HOURLY_CHECKS)


class DiurnalConfig(Config):
    tz: str = "UTC"
    """IANA time zone whose local hours label the profile (e.g. America/Los_Angeles)."""
    trailing_days: int = TRAILING_DAYS


def _requests_cover_power(con) -> AssetCheckResult:
    """WARN when some endpoints log requests and others that drew power log none (no J per token
    for those). A fleet without request logs is a supported input: the profile is power only."""
    silent, logging = con.execute(
        """WITH e AS (SELECT entity, sum(requests_per_s) AS r, max(mean_w) AS w FROM diurnal_profile
                      WHERE date = getvariable('partition_date') AND dow IS NULL AND role = 'inference' AND entity <> role
                      GROUP BY entity)
           SELECT list(entity ORDER BY entity) FILTER (r = 0 AND w > 0), count(*) FILTER (r > 0) FROM e"""
    ).fetchone()
    silent = silent or []
    partial = bool(silent) and logging > 0
    return AssetCheckResult(
        check_name="requests_cover_power",
        passed=not partial,
        severity=AssetCheckSeverity.WARN,
        metadata={"endpoints_without_requests": str(silent), "endpoints_with_requests": logging},
        description=f"no requests logged for {silent} while other endpoints log them" if partial else None,
    )


DIURNAL_CHECKS = [Check("requests_cover_power", "If any endpoint logs requests, every endpoint drawing power does (WARN).", _requests_cover_power)]


def _headline(con) -> dict:
    rows = con.execute(
        """SELECT entity, arg_max(hour, requests_per_s), arg_max(hour, mean_w), max(days)
           FROM diurnal_profile WHERE date = getvariable('partition_date') AND dow IS NULL GROUP BY entity ORDER BY 1"""
    ).fetchall()
    return {
        "peak_request_hour": json_meta([(r[0], r[1]) for r in rows], 0),
        "peak_power_hour": json_meta([(r[0], r[2]) for r in rows], 0),
        "days_in_window": max((r[3] for r in rows), default=0),
    }


@asset(
    partitions_def=daily_partitions,
    # The day's hourly_activity, from every cluster and the fleet-day; the trailing days are read
    # as they are (a profile over fewer days is still a profile, so they do not block the day).
    deps=[hourly_activity, AssetKey(["fleet", "hourly_activity"])],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("diurnal_profile") for c in DIURNAL_CHECKS],
)
def diurnal_profile(context: AssetExecutionContext, warehouse: WarehouseResource, config: DiurnalConfig):
    """Per role and endpoint by local hour (and day of week with ≥ 7 days) over the trailing
    days: mean, p5, p95 power (W), requests/s, prompt and output tokens/s, J per output token."""
    return materialize(
        context, warehouse, "diurnal_profile", DIURNAL_CHECKS, _headline,
        variables={"diurnal_tz": config.tz, "diurnal_days": config.trailing_days},
    )
