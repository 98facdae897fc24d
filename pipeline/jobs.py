"""Jobs: the cluster-day job (everything that reads per-GPU data, one run per cluster-day) and
the fleet-day job (rollups, cross-cluster correlation, diurnal profile, report).

Which asset goes where follows from its partitions (pipeline/partitions.py), so a new asset
module needs no change here. Both run their steps in one process (what `wattline run` does):
a cluster-day's ~20 steps each in its own subprocess took 2 min 26 s from the UI against ~12 s
in-process, the steps being short DuckDB queries (docs/benchmarks.md)."""

from __future__ import annotations

from dagster import AssetKey, AssetsDefinition, AssetSelection, define_asset_job, in_process_executor

from pipeline.partitions import daily_partitions, day_cluster_partitions

CLUSTER_JOB = "cluster_day_job"
FLEET_JOB = "fleet_day_job"


def keys_partitioned_by(assets: list[AssetsDefinition], partitions_def) -> list[AssetKey]:
    return [key for a in assets if isinstance(a, AssetsDefinition) and a.is_materializable and a.partitions_def == partitions_def for key in a.keys]


def build_jobs(assets: list[AssetsDefinition]):
    cluster_day_job = define_asset_job(
        CLUSTER_JOB,
        selection=AssetSelection.assets(*keys_partitioned_by(assets, day_cluster_partitions)),
        executor_def=in_process_executor,
        description="Every per-GPU and per-cluster table of one cluster-day (a run per cluster-day: the unit of parallel work).",
    )
    fleet_day_job = define_asset_job(
        FLEET_JOB,
        selection=AssetSelection.assets(*keys_partitioned_by(assets, daily_partitions)),
        executor_def=in_process_executor,
        description="The fleet-day: role and fleet rollups, cluster correlation, diurnal profile and the report, from the cluster-days' parts.",
    )
    return cluster_day_job, fleet_day_job
