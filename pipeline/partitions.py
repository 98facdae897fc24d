"""How the work is cut: UTC days, and day × cluster for everything that reads per-GPU data.

A cluster-day is the unit of parallel work (see docs/scale-out.md): every asset that reads raw
samples or per-GPU tables is partitioned by ``date`` × ``cluster`` and writes its own Parquet
part, so any number of workers can build cluster-days at once. Fleet-level assets (role and
fleet rollups, cross-cluster correlation, the report) are partitioned by day only and read the
per-cluster reduced parts. Clusters are dynamic partitions, registered from ``inventory.yaml``
(by ``wattline run`` and by the sensor), so adding a cluster needs no code change.
"""

from __future__ import annotations

from dagster import DailyPartitionsDefinition, DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from pipeline.constants import CLUSTER_DIM, DATE_DIM, START_DATE

daily_partitions = DailyPartitionsDefinition(start_date=START_DATE, end_offset=1)
cluster_partitions = DynamicPartitionsDefinition(name=CLUSTER_DIM)
day_cluster_partitions = MultiPartitionsDefinition({DATE_DIM: daily_partitions, CLUSTER_DIM: cluster_partitions})


def cluster_day_key(date: str, cluster: str) -> MultiPartitionKey:
    return MultiPartitionKey({DATE_DIM: date, CLUSTER_DIM: cluster})


def register_clusters(instance, clusters: list[str]) -> list[str]:
    """Add the clusters the instance does not know yet as partitions; returns the new ones."""
    known = set(instance.get_dynamic_partitions(CLUSTER_DIM))
    new = [c for c in clusters if c not in known]
    if new:
        instance.add_dynamic_partitions(CLUSTER_DIM, new)
    return new
