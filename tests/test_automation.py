"""The daily schedule targets yesterday's cluster-days; the sensor fires once per change of a
day's files (a run per cluster) and registers the inventory's clusters as partitions."""

import datetime as dt
import json
import os
import shutil

import pytest
from dagster import (
    DagsterInstance,
    DailyPartitionsDefinition,
    RunsFilter,
    build_schedule_context,
    build_sensor_context,
    in_process_executor,
    partition_loading_context,
)

from collectors.parquet_sink import write_dataset
from pipeline.built_days import RAW_FILES_TAG, day_signature
from pipeline.cli.ui import automation_line
from pipeline.definitions import defs
from pipeline.jobs import CLUSTER_JOB, FLEET_JOB
from pipeline.partitions import partitions_end_offset, partitions_start
from pipeline.resources import WarehouseResource
from pipeline.runner import dagster_home, run_day
from tests.builders import DAY, day_start_ns, power_table, square_wave, write_square_fleet
from tests.clock import before_midnight, midnight_after, pin, schedule_hour_after


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


@pytest.mark.parametrize("instant, built", [(before_midnight(DAY), False), (midnight_after(DAY), True), (schedule_hour_after(DAY), True)],
                         ids=["23:59:59.9", "00:00:00", "01:15"])
def test_sensor_skips_today_and_builds_the_day_once_it_is_over(data_dir, monkeypatch, instant, built):
    """A day's files at 23:59:59.9 UTC of that day: today, still being collected, skipped; from
    00:00:00 the next day on (the schedule's 01:15 included) a completed day, built."""
    t, p = square_wave(5, 1, 100, 200, start_ns=day_start_ns(DAY) + 86_390 * 10**9)  # its last seconds
    write_dataset(power_table("h", 0, t, p), data_dir, "power")
    pin(monkeypatch, instant)
    assert _days(_evaluate(data_dir)[0]) == ([(DAY.isoformat(), "_unassigned")] if built else [])


def test_sensor_registers_the_inventorys_clusters(data_dir):
    write_square_fleet(data_dir, seconds=10)
    with DagsterInstance.ephemeral() as instance:
        _evaluate(data_dir, instance=instance)
        assert instance.get_dynamic_partitions("cluster") == ["c0"]


def _schedule(instance, data_dir, when):
    with build_schedule_context(
        instance=instance, scheduled_execution_time=when, repository_def=defs.get_repository_def(),
        resources={"warehouse": WarehouseResource(data_dir=str(data_dir))},
    ) as context, partition_loading_context(dynamic_partitions_store=instance):
        return defs.resolve_schedule_def("daily_schedule").evaluate_tick(context)


def test_schedule_materializes_yesterdays_cluster_days(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        when = dt.datetime(2026, 12, 1, 1, 15, tzinfo=dt.UTC)
        assert not _schedule(instance, tmp_path / "data", when).run_requests  # no cluster registered yet: skipped, said why
        instance.add_dynamic_partitions("cluster", ["c0", "c1"])
        requests = _schedule(instance, tmp_path / "data", when).run_requests
    assert _days(requests) == [("2026-11-30", "c0"), ("2026-11-30", "c1")]


# A first start of the UI after `wattline run` / `demo`: the sensor knows what those runs read.


@pytest.fixture(scope="module")
def built_day(report_day):
    """The shared square-wave day, built by `wattline run`'s code path (its own Dagster instance on
    disk). Only read here: a test that evaluates the sensor on it copies it first."""
    return report_day.data_dir


def _instance(data_dir):
    """The data dir's Dagster instance, as `wattline run` wrote it (its dagster.yaml reads DAGSTER_HOME)."""
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_dir))  # what run_day sets too
    return DagsterInstance.get()


def test_sensor_launches_nothing_for_a_day_wattline_run_built_then_one_run_per_cluster_for_late_data(built_day, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(built_day, data_dir)  # another path to the same files: the signature is the same
    with _instance(data_dir) as instance:
        requests, cursor = _evaluate(data_dir, instance=instance)  # no cursor: the UI's first tick
        assert requests == []
        assert _evaluate(data_dir, cursor, instance=instance)[0] == []
        t, p = square_wave(10, 1, 100, 200)
        write_dataset(power_table("late-host", 0, t, p), data_dir, "power")
        late, cursor = _evaluate(data_dir, cursor, instance=instance)
        assert _days(late) == [(DAY.isoformat(), "c0"), (DAY.isoformat(), "_unassigned")]  # exactly one run per cluster
        assert {r.tags[RAW_FILES_TAG] for r in late} == {json.loads(cursor)[DAY.isoformat()]}
        assert _evaluate(data_dir, cursor, instance=instance)[0] == []


def test_schedule_skips_a_day_wattline_run_built_then_builds_it_when_its_files_change(built_day, tmp_path):
    """The demo (or a run) built yesterday shortly before the schedule's hour: the schedule launches
    nothing; a late file makes it build the cluster-day again, tagged with the files it reads."""
    data_dir = tmp_path / "data"
    shutil.copytree(built_day, data_dir)
    when = schedule_hour_after(DAY)
    with _instance(data_dir) as instance:
        assert instance.get_dynamic_partitions("cluster") == ["c0"]
        result = _schedule(instance, data_dir, when)
        assert result.run_requests == [] and "already built" in result.skip_message
        t, p = square_wave(10, 1, 100, 200)
        write_dataset(power_table("train-0", 0, t, p), data_dir, "power", prefix="late")
        requests = _schedule(instance, data_dir, when).run_requests
    assert _days(requests) == [(DAY.isoformat(), "c0")]
    assert requests[0].tags[RAW_FILES_TAG] == day_signature(data_dir, DAY.isoformat())


def test_a_failed_cluster_day_run_does_not_count_as_the_day_built(built_day, tmp_path):
    """A run that read the day's files and failed (killed, out of memory) leaves the day to build:
    the UI's first tick and the schedule request it again."""
    data_dir = tmp_path / "data"
    shutil.copytree(built_day, data_dir)
    when = schedule_hour_after(DAY)
    with _instance(data_dir) as instance:
        (run,) = instance.get_runs(RunsFilter(job_name=CLUSTER_JOB))
        assert run.tags[RAW_FILES_TAG] == day_signature(data_dir, DAY.isoformat())
        instance.report_run_failed(run)
        assert _days(_evaluate(data_dir, instance=instance)[0]) == [(DAY.isoformat(), "c0")]
        assert _days(_schedule(instance, data_dir, when).run_requests) == [(DAY.isoformat(), "c0")]


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_selection_run_does_not_count_as_the_day_built(tmp_path):
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=5)
    assert run_day(data_dir, DAY.isoformat(), selection=["power_1s"], fleet_day=False).success
    with _instance(data_dir) as instance:
        assert _days(_evaluate(data_dir, instance=instance)[0]) == [(DAY.isoformat(), "c0")]


def test_ui_says_in_one_line_that_automation_is_on_and_launches_nothing(built_day, monkeypatch):
    monkeypatch.delenv("WATTLINE_AUTOMATION", raising=False)
    line = automation_line(built_day, {"DAGSTER_HOME": str(dagster_home(built_day))})
    assert "\n" not in line and line.startswith("automation on:")
    assert "now nothing (the 1 completed day(s) with data are built from their current files)" in line
    monkeypatch.setenv("WATTLINE_AUTOMATION", "off")
    assert automation_line(built_day, {}).startswith("automation off")


def test_ui_line_names_the_days_the_sensor_would_build(data_dir, monkeypatch):
    monkeypatch.delenv("WATTLINE_AUTOMATION", raising=False)
    write_square_fleet(data_dir, seconds=5)
    line = automation_line(data_dir, {"DAGSTER_HOME": str(dagster_home(data_dir))})
    assert f"now 1 cluster-day run(s) for {DAY.isoformat()}" in line


def test_late_data_before_the_partitions_first_day_waits_for_a_reload(data_dir, monkeypatch):
    """The partitions start at the data's first day, scanned when the code location loads: a
    day older than that cannot be launched until it reloads, and is not forgotten meanwhile."""
    write_square_fleet(data_dir, seconds=5)
    later = (DAY + dt.timedelta(days=1)).isoformat()
    monkeypatch.setattr("pipeline.sensors.daily_partitions", DailyPartitionsDefinition(start_date=later, end_offset=1))
    requests, cursor = _evaluate(data_dir)
    assert requests == [] and DAY.isoformat() not in json.loads(cursor)
    monkeypatch.undo()  # the reload
    assert _days(_evaluate(data_dir, cursor)[0]) == [(DAY.isoformat(), "c0")]


@pytest.mark.parametrize(
    "setting, want",
    [(None, "2020-01-01"), ("data", DAY.isoformat()), ("2026-11-01", "2026-11-01")],
)
def test_partitions_start_where_the_data_starts(data_dir, monkeypatch, setting, want):
    write_square_fleet(data_dir, seconds=5)
    t, p = square_wave(5, 1, 100, 200, start_ns=day_start_ns(DAY + dt.timedelta(days=2)))
    write_dataset(power_table("train-0", 0, t, p), data_dir, "power")
    (data_dir / "power" / "date=2026-10-01").mkdir()  # an empty folder is no data
    monkeypatch.setenv("WATTLINE_DATA_DIR", str(data_dir))
    if setting is None:
        monkeypatch.delenv("WATTLINE_FIRST_DAY", raising=False)
    else:
        monkeypatch.setenv("WATTLINE_FIRST_DAY", setting)
    assert partitions_start(DAY + dt.timedelta(days=3)) == want


@pytest.mark.parametrize("instant", [before_midnight(DAY + dt.timedelta(days=3)), midnight_after(DAY + dt.timedelta(days=3))],
                         ids=["23:59:59.9", "00:00:00"])
def test_the_uis_partitions_end_at_the_last_completed_day(data_dir, monkeypatch, instant):
    """In ``wattline ui`` (partitions from WATTLINE_FIRST_DAY) the last partition, the dialog's
    "Latest", is yesterday: a completed day, not today's, still being collected. ``wattline run``
    keeps every day up to today. The day is read once, when the code location loads, and Dagster
    counts the partitions at the instant it is asked: here both are the same instant."""
    today = instant.date()
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    monkeypatch.setenv("WATTLINE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("WATTLINE_FIRST_DAY", raising=False)
    assert partitions_end_offset("2020-01-01", today) == 1
    monkeypatch.setenv("WATTLINE_FIRST_DAY", "data")
    offset = partitions_end_offset(DAY.isoformat(), today)
    keys = DailyPartitionsDefinition(start_date=DAY.isoformat(), end_offset=offset).get_partition_keys(current_time=instant)
    assert keys[0] == DAY.isoformat() and keys[-1] == yesterday
    assert partitions_end_offset(today.isoformat(), today) == 1  # data only from today: today's partition, so there is one
    monkeypatch.setenv("WATTLINE_FIRST_DAY", "2026-11-01")
    assert partitions_end_offset("2026-11-01", today) == 0


def test_partitions_of_an_empty_data_dir_start_today_and_a_bad_setting_is_named(data_dir, monkeypatch):
    monkeypatch.setenv("WATTLINE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("WATTLINE_FIRST_DAY", "data")
    today = DAY + dt.timedelta(days=3)
    assert partitions_start(today) == today.isoformat()
    monkeypatch.setenv("WATTLINE_FIRST_DAY", "1999-01-01")
    with pytest.raises(ValueError, match="WATTLINE_FIRST_DAY: day 1999-01-01 is outside"):
        partitions_start(today)
    monkeypatch.setenv("WATTLINE_FIRST_DAY", (today + dt.timedelta(days=1)).isoformat())  # tomorrow: no partition yet
    with pytest.raises(ValueError, match=f"outside the days the pipeline can run \\(2020-01-01..{today.isoformat()} "):
        partitions_start(today)
    monkeypatch.setenv("WATTLINE_FIRST_DAY", "yesterday")
    with pytest.raises(ValueError, match="not a day"):
        partitions_start(today)


def test_jobs_run_in_process_and_the_instance_is_quiet(tmp_path):
    for job in (CLUSTER_JOB, FLEET_JOB):
        assert defs.resolve_job_def(job).executor_def is in_process_executor
    with _instance(tmp_path / "data") as instance:
        assert instance.python_log_level == "INFO" and not instance.nux_enabled
        queue = instance.run_coordinator
        assert queue.dequeue_interval_seconds == 1 and queue.get_run_queue_config().max_concurrent_runs == 2
