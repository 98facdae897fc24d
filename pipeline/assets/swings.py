"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous 100 ms trace and on the driver's 1 s average."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource

INCOMPLETE_WARN_SHARE = 0.05


def _consistent(con) -> AssetCheckResult:
    """A longer window contains shorter ones, so its max swing cannot be smaller; p50 ≤ p99 ≤ max."""
    rows = con.execute(
        """
        SELECT level, entity, series, window_s, max_swing_w, p50_swing_w, p99_swing_w,
               max(max_swing_w) OVER (PARTITION BY level, entity, series ORDER BY window_s) AS running_max
        FROM swing_stats WHERE date = getvariable('partition_date')
        QUALIFY max_swing_w < running_max - 1e-3 OR p50_swing_w > p99_swing_w + 1e-3 OR p99_swing_w > max_swing_w + 1e-3
        """
    ).fetchall()
    return violations("swings_consistent", rows, AssetCheckSeverity.ERROR, f"{len(rows)} row(s) break max swing monotonic in W or p50 ≤ p99 ≤ max")


def _windows_complete(con) -> AssetCheckResult:
    rows = con.execute(
        """
        SELECT level || ':' || entity, windows_incomplete / greatest(windows_complete + windows_incomplete, 1) AS share
        FROM swing_stats WHERE date = getvariable('partition_date') AND window_s = 2 AND series = 'instant'
        ORDER BY share DESC
        """
    ).fetchall()
    bad = [(e, round(s, 4)) for e, s in rows if s > INCOMPLETE_WARN_SHARE]
    return AssetCheckResult(
        check_name="windows_complete",
        passed=bool(rows) and not bad,
        severity=AssetCheckSeverity.WARN,
        metadata={"entities": len(rows), "over_5pct_incomplete": len(bad), "worst": str(bad[:10])},
        description=(f"{len(bad)} entit(y/ies) lose > 5% of their 2 s windows to missing samples" if bad else None) if rows else "no swing rows",
    )


CHECKS = [
    Check("swings_consistent", "Max swing grows with the window; p50 ≤ p99 ≤ max (ERROR: a computation bug).", _consistent),
    Check("windows_complete", "≤ 5% of each entity's 2 s windows are incomplete (WARN).", _windows_complete),
]


def _headline(con) -> dict:
    rows = con.execute(
        """SELECT level || ':' || entity || ' ' || series, max_swing_pct FROM swing_stats
           WHERE date = getvariable('partition_date') AND window_s = 2 AND level IN ('cluster', 'role', 'fleet')
           ORDER BY 1"""
    ).fetchall()
    return {"max_2s_swing_pct": json_meta(rows)}


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_100ms", "fleet_power_100ms"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("swing_stats") for c in CHECKS],
)
def swing_stats(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per level, entity, window (1/2/10/60 s) and series (instant/avg1s): max swing in any
    sliding window (W and % of provisioned), p50/p99 over aligned windows, max 100 ms ramp
    (W/s), aligned windows over 10%/25% of provisioned."""
    return materialize(context, warehouse, "swing_stats", CHECKS, _headline)
