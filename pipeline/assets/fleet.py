"""Fleet-day rollups of the power series and swings: the role and fleet rows of the tables whose
cluster-days hold only their own hosts, clusters and cluster_role parts. (Tables declared with
``Table(rollup=True)`` get theirs from pipeline/tables.py.)

They read the cluster-days' reduced parts only (their connection has no raw power and no
per-GPU table, see pipeline/scope.py), so the fleet-day costs the same whether a cluster has 16
GPUs or 16,000. Keys are prefixed ``fleet/``: ``fleet/swing_stats`` writes the fleet-day part
of table ``swing_stats``.
"""

from dagster import AssetKey, asset

from pipeline.assetkit import materialize
from pipeline.assets.grid import FLEET_CHECKS, _fleet_headline
from pipeline.assets.power import fleet_power_1s_headline
from pipeline.assets.swings import CHECKS as SWING_CHECKS
from pipeline.assets.swings import _headline as _swing_headline
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


SQL = {t: f"rollup/{t}" for t in ("fleet_power_1s", "fleet_power_100ms")}
HEADLINES = {
    "fleet_power_1s": fleet_power_1s_headline,
    "fleet_power_100ms": _fleet_headline,
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
