"""Asset-check results in the UI: each belongs to its partition (a day × cluster's result is that
partition's, not whichever cluster-day ran last), an ERROR blocks what is built on it, and the
violating rows show as a table with the query's column names."""

import numpy as np
import pytest
from dagster import AssetCheckSeverity, AssetKey, DagsterInstance, TableMetadataValue

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.definitions import build_definitions
from pipeline.jobs import CLUSTER_JOB
from pipeline.partitions import cluster_day_key, day_cluster_partitions, register_clusters
from pipeline.runner import dagster_home
from tests.builders import DAY, power_table, square_wave


def _spec(defs, asset: str, check: str):
    assets_def = defs.resolve_assets_def(AssetKey(asset))
    return next(s for s in assets_def.check_specs if s.name == check)


def test_error_checks_block_warns_do_not_and_every_check_is_partitioned():
    defs = build_definitions()
    bounds = _spec(defs, "power_1s", "power_within_bounds")
    assert bounds.blocking and bounds.partitions_def == day_cluster_partitions
    assert not _spec(defs, "power_1s", "gpu_coverage").blocking  # a WARN
    # ERRORs about input set aside: the table is sound for the rest of the day, nothing is blocked
    assert not _spec(defs, "power_1s", "files_follow_contract").blocking
    assert not _spec(defs, "power_1s", "no_duplicate_samples").blocking
    fleet = defs.resolve_assets_def(AssetKey(["fleet", "fleet_power_1s"]))
    assert all(s.partitions_def == fleet.partitions_def for s in fleet.check_specs)


def _two_cluster_inventory(data_dir) -> None:
    def host(name, role):
        extra = {"jobs": [{"name": "job-a", "gpus": [0]}]} if role == "training" else {"endpoints": [{"name": "ep-a", "gpus": [0]}]}
        return {"name": name, "role": role, "gpus": [{"index": 0, "tdp_w": 700.0}], **extra}

    clusters = [{"name": "c0", "provisioned_w": 2000, "hosts": [host("train-0", "training")]},
                {"name": "c1", "provisioned_w": 2000, "hosts": [host("infer-0", "inference")]}]
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "test", "clusters": clusters}]}), data_dir / "inventory.yaml")


@pytest.fixture
def two_clusters_one_bad(tmp_path, monkeypatch):
    """Cluster c0's GPU draws 2,000 W at times (over 2 × TDP: the ERROR check fails); c1 is sound."""
    data_dir = tmp_path / "data"
    _two_cluster_inventory(data_dir)
    t, p = square_wave(10, 4, 100, 700)
    write_dataset(power_table("train-0", 0, t, np.where(p > 400, 2000.0, p)), data_dir, "power", prefix="train-0-0")
    write_dataset(power_table("infer-0", 0, t, p), data_dir, "power", prefix="infer-0-0")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(data_dir)))
    return data_dir


def _run(defs, instance, cluster):
    job = defs.resolve_job_def(CLUSTER_JOB)
    keys = [AssetKey("power_1s"), AssetKey("fleet_power_1s")]
    return job.execute_in_process(partition_key=cluster_day_key(DAY.isoformat(), cluster), instance=instance, raise_on_error=False,
                                  asset_selection=keys)


@pytest.mark.slow  # two cluster-day runs of the daily job
def test_a_failed_error_check_is_its_partitions_blocks_downstream_and_shows_a_table(two_clusters_one_bad):
    data_dir = two_clusters_one_bad
    defs = build_definitions(str(data_dir))
    day = DAY.isoformat()
    with DagsterInstance.get() as instance:
        register_clusters(instance, ["c0", "c1"])
        bad = _run(defs, instance, "c0")
        good = _run(defs, instance, "c1")  # runs after: its pass must not hide c0's ERROR
        [bounds] = [e for e in bad.get_asset_check_evaluations() if e.check_name == "power_within_bounds"]
        assert not bounds.passed and bounds.severity == AssetCheckSeverity.ERROR and bounds.blocking
        assert bounds.partition == cluster_day_key(day, "c0")
        assert not bad.success  # blocked: fleet_power_1s is not built on wrong numbers
        assert [e.asset_key for e in bad.get_asset_materialization_events()] == [AssetKey("power_1s")]
        assert good.success
        assert {e.asset_key for e in good.get_asset_materialization_events()} == {AssetKey("power_1s"), AssetKey("fleet_power_1s")}
        examples = bounds.metadata["examples"]
        assert isinstance(examples, TableMetadataValue)
        assert [c.name for c in examples.schema.columns] == ["host", "gpu", "min_w", "max_w", "tdp_w"]
        [row] = examples.records
        assert row.data["host"] == "train-0" and row.data["gpu"] == 0 and row.data["max_w"] == 2000.0 and row.data["tdp_w"] == 700.0
        # the instance keeps each partition's own latest result
        records = instance.event_log_storage.get_asset_check_execution_history(bounds.asset_check_key, limit=10)
        by_partition = {r.event.dagster_event.event_specific_data.partition: r.event.dagster_event.event_specific_data.passed for r in records}
        assert by_partition == {cluster_day_key(day, "c0"): False, cluster_day_key(day, "c1"): True}
