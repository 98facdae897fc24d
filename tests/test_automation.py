"""The daily schedule targets yesterday's cluster-days; the sensor fires once per change of a
day's files (a run per cluster) and registers the inventory's clusters as partitions."""

import datetime as dt
import json

from dagster import DagsterInstance, build_schedule_context, build_sensor_context, partition_loading_context

from collectors.parquet_sink import write_dataset
from pipeline.definitions import defs
from pipeline.resources import WarehouseResource
from tests.builders import DAY, power_table, square_wave, write_square_fleet


def _evaluate(data_dir, cursor=None, instance=None):
    with DagsterInstance.ephemeral() as own:
        instance = instance or own
        context = build_sensor_context(
            cursor=cursor,
            resources={"warehouse": WarehouseResource(data_dir=str(data_dir))},
            definitions=defs,
            instance=instance,
        )
        # The daemon validates run requests' dynamic partition keys against the instance;
        # evaluate_tick outside it needs to be told which instance that is.
        with partition_loading_context(dynamic_partitions_store=instance):
            result = defs.resolve_sensor_def("new_parquet_sensor").evaluate_tick(context)
    return result.run_requests, result.cursor


def _days(requests):
    return [(r.partition_key.keys_by_dimension["date"], r.partition_key.keys_by_dimension["cluster"]) for r in requests]


def test_sensor_runs_a_day_when_its_parquet_lands_and_again_when_late_data_arrives(data_dir):
    assert _evaluate(data_dir)[0] == []
    write_square_fleet(data_dir, seconds=10)
    requests, cursor = _evaluate(data_dir)
    assert _days(requests) == [(DAY.isoformat(), "c0")]  # one run per cluster of the inventory
    assert _evaluate(data_dir, cursor)[0] == []  # nothing changed: no second run
    t, p = square_wave(10, 1, 100, 200)
    write_dataset(power_table("late-host", 0, t, p), data_dir, "power")
    late, cursor2 = _evaluate(data_dir, cursor)
    assert _days(late) == [(DAY.isoformat(), "c0"), (DAY.isoformat(), "_unassigned")]  # late-host is not in the inventory
    assert late[0].run_key != requests[0].run_key
    assert DAY.isoformat() in json.loads(cursor2)


def test_sensor_skips_today(data_dir):
    today = dt.datetime.now(dt.UTC)
    start = int(today.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()) * 10**9
    t, p = square_wave(5, 1, 100, 200, start_ns=start)
    write_dataset(power_table("h", 0, t, p), data_dir, "power")
    assert _evaluate(data_dir)[0] == []


def test_sensor_registers_the_inventorys_clusters(data_dir):
    write_square_fleet(data_dir, seconds=10)
    with DagsterInstance.ephemeral() as instance:
        _evaluate(data_dir, instance=instance)
        assert instance.get_dynamic_partitions("cluster") == ["c0"]


def test_schedule_materializes_yesterdays_cluster_days(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        when = dt.datetime(2026, 12, 1, 1, 15, tzinfo=dt.UTC)
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=when, repository_def=defs.get_repository_def()
        )
        schedule = defs.resolve_schedule_def("daily_schedule")
        with partition_loading_context(dynamic_partitions_store=instance):
            assert not schedule.evaluate_tick(context).run_requests  # no cluster registered yet: skipped, said why
            instance.add_dynamic_partitions("cluster", ["c0", "c1"])
            requests = schedule.evaluate_tick(context).run_requests
    assert _days(requests) == [("2026-11-30", "c0"), ("2026-11-30", "c1")]
