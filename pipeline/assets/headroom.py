"""`power_headroom`: how close each host and cluster runs to its provisioned power at 2 s, and
how many more hosts of the same profile a cluster could take (resampling observed host-days)."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, Config, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource


class HeadroomConfig(Config):
    exceed_share: float = 0.001
    """Share of 2 s windows the cluster may spend above provisioned power after adding hosts."""


def _within_provisioned(con) -> AssetCheckResult:
    """WARN when a domain already exceeded its provisioned power at 2 s today (a real finding, not a bug)."""
    rows = con.execute(
        """SELECT level || ':' || entity, round(max_2s_w), provisioned_w FROM power_headroom
           WHERE date = getvariable('partition_date') AND max_2s_w > provisioned_w ORDER BY 1"""
    ).fetchall()
    return violations("within_provisioned", rows, AssetCheckSeverity.WARN, f"{len(rows)} domain(s) drew more than provisioned power over a 2 s window", count_key="domains_over", examples=10)


def _ordered(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT level, entity FROM power_headroom WHERE date = getvariable('partition_date')
           AND NOT (p99_2s_w <= p999_2s_w + 1e-3 AND p999_2s_w <= max_2s_w + 1e-3)"""
    ).fetchall()
    return violations("quantiles_ordered", rows, AssetCheckSeverity.ERROR)


CHECKS = [
    Check("within_provisioned", "No host or cluster exceeded its provisioned power over any 2 s window (WARN).", _within_provisioned),
    Check("quantiles_ordered", "p99 ≤ p99.9 ≤ max at 2 s (ERROR).", _ordered),
]


def _headline(con) -> dict:
    rows = con.execute(
        """SELECT entity, headroom_pct, extra_hosts_estimate FROM power_headroom
           WHERE date = getvariable('partition_date') AND level = 'cluster' ORDER BY 1"""
    ).fetchall()
    return {
        "cluster_headroom_pct": json_meta([(r[0], r[1]) for r in rows]),
        "cluster_extra_hosts_estimate": json_meta([(r[0], r[2]) for r in rows], 0),
    }


@asset(
    partitions_def=day_cluster_partitions,
    deps=["fleet_power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("power_headroom") for c in CHECKS],
)
def power_headroom(context: AssetExecutionContext, warehouse: WarehouseResource, config: HeadroomConfig):
    """Per host and cluster and day: provisioned W, p99/p99.9/max of 2 s power, headroom %, and
    (clusters) how many more hosts of the same profile fit before 2 s power exceeds provisioned
    for more than `exceed_share` of the time — by resampling observed host-days (see
    docs/metrics.md and sql/power_headroom.sql)."""
    return materialize(
        context, warehouse, "power_headroom", CHECKS, _headline, variables={"headroom_exceed_share": config.exceed_share}
    )
