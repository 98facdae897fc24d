"""Jobs: the cluster-day job (everything that reads per-GPU data, one run per cluster-day) and
the fleet-day job (rollups, cross-cluster correlation, diurnal profile, report).

Which asset goes where follows from its partitions (pipeline/partitions.py), so a new asset
module needs no change here."""

from __future__ import annotations

from dagster import AssetKey, AssetsDefinition, AssetSelection, define_asset_job

from pipeline.partitions import daily_partitions, day_cluster_partitions

CLUSTER_JOB = "cluster_day_job"
FLEET_JOB = "fleet_day_job"


def keys_partitioned_by(assets: list[AssetsDefinition], partitions_def) -> list[AssetKey]:
    return [key for a in assets if isinstance(a, AssetsDefinition) and a.is_materializable and a.partitions_def == partitions_def for key in a.keys]


def build_jobs(assets: list[AssetsDefinition]):
    cluster_day_job = define_asset_job(
        CLUSTER_JOB,
        selection=AssetSelection.assets(*keys_partitioned_by(assets, day_cluster_partitions)),
        description="Every per-GPU and per-cluster table of one cluster-day (a run per cluster-day: the unit of parallel work).",
    )
    fleet_day_job = define_asset_job(
        FLEET_JOB,
        selection=AssetSelection.assets(*keys_partitioned_by(assets, daily_partitions)),
        description="The fleet-day: role and fleet rollups, cluster correlation, diurnal profile and the report, from the cluster-days' parts.",
    )
    return cluster_day_job, fleet_day_job
