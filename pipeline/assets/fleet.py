"""Fleet-day rollups: the role and fleet rows of the tables whose cluster-days hold only their
own hosts, clusters and cluster_role parts, and the correlation between clusters.

They read the cluster-days' reduced parts only (their connection has no raw power and no
per-GPU table, see pipeline/scope.py), so the fleet-day costs the same whether a cluster has 16
GPUs or 16,000. Keys are prefixed ``fleet/``: ``fleet/swing_stats`` writes the fleet-day part
of table ``swing_stats``.
"""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetKey, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.assets.correlation import COINCIDENCE_CHECKS, _coincidence_headline
from pipeline.assets.grid import FLEET_CHECKS, _fleet_headline
from pipeline.assets.power import fleet_power_1s_headline
from pipeline.assets.summary import SUMMARY_CHECKS, _summary_headline
from pipeline.assets.swings import CHECKS as SWING_CHECKS
from pipeline.assets.swings import _headline as _swing_headline
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions
from pipeline.resources import WarehouseResource

PREFIX = "fleet"
ROLLUP_GROUP = "fleet"


def rollup_key(table: str) -> AssetKey:
    return AssetKey([PREFIX, table])


def _rollup(table: str, checks, deps, doc: str):
    @asset(
        name=table,
        key_prefix=[PREFIX],
        partitions_def=daily_partitions,
        deps=deps,
        group_name=ROLLUP_GROUP,
        kinds={"duckdb", "parquet"},
        check_specs=[c.spec(rollup_key(table)) for c in checks],
        description=doc,
    )
    def _asset(context, warehouse: WarehouseResource):
        return materialize(context, warehouse, table, checks, HEADLINES.get(table), sql=SQL.get(table, table))

    return _asset


SQL = {t: f"rollup/{t}" for t in ("fleet_power_1s", "fleet_power_100ms", "power_summary", "coincidence")}
HEADLINES = {
    "fleet_power_1s": fleet_power_1s_headline,
    "fleet_power_100ms": _fleet_headline,
    "power_summary": _summary_headline,
    "coincidence": _coincidence_headline,
    "swing_stats": _swing_headline,
}

fleet_power_1s = _rollup(
    "fleet_power_1s", [], ["fleet_power_1s"],
    "Per second, role and fleet power (W), energy (J), GPUs reporting and % of provisioned, summed from the cluster-days.",
)
fleet_power_100ms = _rollup(
    "fleet_power_100ms", FLEET_CHECKS, ["fleet_power_100ms", fleet_power_1s],
    "Per 100 ms slot, role and fleet power summed from the cluster-days' parts; complete when every part is.",
)
swing_stats = _rollup(
    "swing_stats", SWING_CHECKS, [fleet_power_100ms],
    "Max swing per window (1/2/10/60 s) of the role and fleet series, as swing_stats computes it per cluster.",
)
power_summary = _rollup(
    "power_summary", SUMMARY_CHECKS, ["power_summary", fleet_power_100ms],
    "Role and fleet mean, p99, p99.9, max, energy and GPU-time shares, from the rolled-up series and the cluster-days' parts.",
)
coincidence = _rollup(
    "coincidence", COINCIDENCE_CHECKS, ["coincidence", fleet_power_1s],
    "Role and fleet coincidence factor and smoothing ratio, from the cluster-days' member sums and the rolled-up 1 s series.",
)
hourly_activity = _rollup(
    "hourly_activity", [], [fleet_power_1s, "requests"],
    "Per role and UTC hour: complete seconds, summed power, energy, 1 s power histogram and requests (endpoint rows are per cluster).",
)


def _pairs_valid(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT cluster_a, cluster_b, pearson_1s, best_lag_r FROM cluster_correlation
           WHERE date = getvariable('partition_date')
             AND NOT (pearson_1s BETWEEN -1.000001 AND 1.000001 AND best_lag_r >= pearson_1s - 1e-6)"""
    ).fetchall()
    return violations("correlation_valid", rows, AssetCheckSeverity.ERROR, f"{len(rows)} pair(s) with r outside [-1, 1] or a best lag worse than lag 0")


CLUSTER_CORR_CHECKS = [Check("correlation_valid", "−1 ≤ r ≤ 1 and the best lag's r ≥ lag 0's (ERROR).", _pairs_valid)]


def _corr_headline(con) -> dict:
    rows = con.execute(
        """SELECT cluster_a || ' ~ ' || cluster_b, pearson_1s FROM cluster_correlation
           WHERE date = getvariable('partition_date') AND cluster_a < cluster_b ORDER BY 1"""
    ).fetchall()
    return {"pearson_1s": json_meta(rows, 3)}


@asset(
    partitions_def=daily_partitions,
    deps=[fleet_power_1s],
    group_name=ROLLUP_GROUP,
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("cluster_correlation") for c in CLUSTER_CORR_CHECKS],
)
def cluster_correlation(context, warehouse: WarehouseResource):
    """Per ordered pair of clusters: Pearson correlation of their summed 1 s power and the best
    lag (±10 s). Near zero is what keeps a fleet's sum smooth."""
    return materialize(context, warehouse, "cluster_correlation", CLUSTER_CORR_CHECKS, _corr_headline)
