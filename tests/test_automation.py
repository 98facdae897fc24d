"""The daily schedule targets yesterday's partition; the sensor fires once per change of a day's files."""

import datetime as dt
import json

from dagster import DagsterInstance, build_schedule_context, build_sensor_context

from pipeline.definitions import defs
from pipeline.resources import WarehouseResource
from tests.builders import DAY, power_table, square_wave, write_square_fleet
from collectors.parquet_sink import write_dataset


def _evaluate(data_dir, cursor=None):
    context = build_sensor_context(
        cursor=cursor,
        resources={"warehouse": WarehouseResource(data_dir=str(data_dir))},
        definitions=defs,
    )
    result = defs.resolve_sensor_def("new_parquet_sensor").evaluate_tick(context)
    return result.run_requests, result.cursor


def test_sensor_runs_a_day_when_its_parquet_lands_and_again_when_late_data_arrives(data_dir):
    assert _evaluate(data_dir)[0] == []
    write_square_fleet(data_dir, seconds=10)
    requests, cursor = _evaluate(data_dir)
    assert [r.partition_key for r in requests] == [DAY.isoformat()]
    assert _evaluate(data_dir, cursor)[0] == []  # nothing changed: no second run
    t, p = square_wave(10, 1, 100, 200)
    write_dataset(power_table("late-host", 0, t, p), data_dir, "power")
    late, cursor2 = _evaluate(data_dir, cursor)
    assert [r.partition_key for r in late] == [DAY.isoformat()]
    assert late[0].run_key != requests[0].run_key
    assert DAY.isoformat() in json.loads(cursor2)


def test_sensor_skips_today(data_dir):
    today = dt.datetime.now(dt.timezone.utc)
    start = int(today.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()) * 10**9
    t, p = square_wave(5, 1, 100, 200, start_ns=start)
    write_dataset(power_table("h", 0, t, p), data_dir, "power")
    assert _evaluate(data_dir)[0] == []


def test_schedule_materializes_yesterdays_partition():
    with DagsterInstance.ephemeral() as instance:
        when = dt.datetime(2026, 12, 1, 1, 15, tzinfo=dt.timezone.utc)
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=when, repository_def=defs.get_repository_def()
        )
        requests = defs.resolve_schedule_def("daily_job_schedule").evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-11-30"]
