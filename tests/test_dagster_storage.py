"""The data dir's Dagster instance: Dagster's SQLite files, opened once per file and process.

A run writes a few hundred events; each used to build a SQLAlchemy engine (and SQLite connection
set-up) several times over. The history these files hold must stay readable both ways: runs that
Dagster's stock ``storage: sqlite:`` wrote are read by ours, and ours by it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dagster import (
    AssetCheckResult,
    AssetKey,
    DagsterInstance,
    RunsFilter,
    asset,
    asset_check,
    materialize,
)
from sqlalchemy import event
from sqlalchemy.pool import Pool

from pipeline import runner
from pipeline.constants import REPO_DAGSTER_YAML
from pipeline.runner import dagster_home, run_day
from tests.builders import DAY, power_table, square_wave, two_host_inventory

DATE = DAY.isoformat()

STOCK_YAML = """storage:
  sqlite:
    base_dir:
      env: DAGSTER_HOME
"""
"""Dagster's own SQLite storage, as a data dir's dagster.yaml named it before."""


@asset
def watts() -> int:
    return 700


@asset_check(asset=watts)
def watts_below_tdp() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@pytest.fixture
def engines():
    """Counts SQLAlchemy engines that opened a connection (a pool's first connection)."""
    opened: list[str] = []

    def first(dbapi_connection, record):
        opened.append("engine")

    event.listen(Pool, "first_connect", first)
    try:
        yield opened
    finally:
        event.remove(Pool, "first_connect", first)


def _home(tmp_path: Path, yaml_text: str) -> Path:
    home = tmp_path / ".dagster"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml_text)
    return home


def _materialize_in(home: Path, monkeypatch) -> str:
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance:
        result = materialize([watts, watts_below_tdp], instance=instance)
        assert result.success
        return result.run_id


def _history(home: Path, monkeypatch) -> tuple[list[str], int, list[bool]]:
    """(run ids, materializations of ``watts``, check results) as an instance on ``home`` reads them."""
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance:
        runs = [r.run_id for r in instance.get_runs(RunsFilter())]
        materialized = len(instance.fetch_materializations(AssetKey("watts"), limit=10).records)
        checks = instance.event_log_storage.get_asset_check_execution_history(watts_below_tdp.check_key, limit=10)
        return runs, materialized, [c.evaluation.passed for c in checks if c.evaluation]


def test_the_data_dirs_instance_is_dagsters_sqlite_storage_in_the_same_files(tmp_path, monkeypatch):
    home = dagster_home(tmp_path / "data")
    run_id = _materialize_in(home, monkeypatch)
    assert (home / "history" / "runs.db").is_file() and (home / "history" / "runs" / "index.db").is_file()
    assert (home / "history" / "runs" / f"{run_id}.db").is_file() and (home / "schedules" / "schedules.db").is_file()


def test_history_written_by_dagsters_own_storage_is_read_and_the_other_way_round(tmp_path, monkeypatch):
    old = _home(tmp_path / "old", STOCK_YAML)
    first = _materialize_in(old, monkeypatch)
    shutil.copyfile(REPO_DAGSTER_YAML, old / "dagster.yaml")  # what dagster_home() does to an existing data dir
    assert _history(old, monkeypatch) == ([first], 1, [True])
    second = _materialize_in(old, monkeypatch)
    (old / "dagster.yaml").write_text(STOCK_YAML)  # an older wattline on the same data dir
    assert _history(old, monkeypatch) == ([second, first], 2, [True, True])


def test_an_event_opens_no_engine_of_its_own(tmp_path, monkeypatch, engines):
    home = dagster_home(tmp_path / "data")
    _materialize_in(home, monkeypatch)  # the instance's files exist: what follows is a second run
    engines.clear()
    _materialize_in(home, monkeypatch)
    # one engine per file: runs.db, index.db, schedules.db, the run's own file (Dagster's storage: 56)
    assert len(engines) <= 6, len(engines)


def _tiny_day(data_dir: Path) -> None:
    from collectors.parquet_sink import write_dataset

    two_host_inventory(data_dir)
    t, p = square_wave(30, 4.0, 100.0, 700.0)
    write_dataset(power_table("train-0", 0, t, p), data_dir, "power", prefix="train-0-0")


def test_a_run_opens_one_instance_builds_its_code_location_once_and_one_engine_per_file(tmp_path, monkeypatch, engines):
    data_dir = tmp_path / "data"
    _tiny_day(data_dir)
    opened, built = [], []
    real_get, real_build = DagsterInstance.get, runner.build_definitions
    monkeypatch.setattr(DagsterInstance, "get", staticmethod(lambda: opened.append(1) or real_get()))
    monkeypatch.setattr(runner, "build_definitions", lambda *a, **k: built.append(1) or real_build(*a, **k))
    outcome = run_day(data_dir, DATE, selection=["power_1s", "fleet_power_1s"], workers=1)
    assert outcome.ok, outcome.error
    assert outcome.cluster_days == 1 and outcome.fleet_day_ran  # two Dagster runs
    assert (len(opened), len(built)) == (1, 1)
    # runs.db, index.db, schedules.db and each run's file, each opened once
    assert len(engines) <= 12, len(engines)  # with the instance's own set-up checks
    assert os.environ["DAGSTER_HOME"] == str(dagster_home(data_dir))


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def test_storage_connections_commit_without_waiting_for_the_disk(tmp_path, monkeypatch):
    """WAL mode with synchronous=NORMAL: a commit waits for no fsync (the WAL is synced at checkpoints)."""
    home = dagster_home(tmp_path / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance:
        run_id = materialize([watts, watts_below_tdp], instance=instance).run_id
        storage = instance.event_log_storage
        for connection in (instance.run_storage.connect(), storage.index_connection(), storage.run_connection(run_id)):
            with connection as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL (SQLite's default: 2, FULL)


def test_a_use_of_a_file_is_never_its_last_connection_while_the_instance_is_open(tmp_path, monkeypatch):
    """Each use opens its own connection; one more kept open on each file being written means its
    close neither checkpoints nor deletes the WAL (as the last connection's close does). The run's
    own file is let go when the run ends, the rest when the instance is disposed."""
    home = dagster_home(tmp_path / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    runs = home / "history" / "runs"
    with DagsterInstance.get() as instance:
        run_id = materialize([watts, watts_below_tdp], instance=instance).run_id
        assert _wal(runs / "index.db").exists() and _wal(home / "history" / "runs.db").exists()
        assert not _wal(runs / f"{run_id}.db").exists()  # the run ended: its file is only read now
        assert len(instance.all_logs(run_id)) > 5  # reading a finished run keeps nothing open
        assert not _wal(runs / f"{run_id}.db").exists()
    # disposed: nothing kept open, so no WAL or WAL index is left beside any file (as a reader of a
    # shared day's history must leave it)
    assert not [p.name for p in home.rglob("*") if p.name.endswith(("-wal", "-shm"))]
    assert _history(home, monkeypatch) == ([run_id], 1, [True])


def test_a_wiped_instance_keeps_no_file_of_a_run_open(tmp_path, monkeypatch):
    home = dagster_home(tmp_path / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance:
        materialize([watts, watts_below_tdp], instance=instance)
        instance.wipe()
        assert sorted(p.name for p in (home / "history" / "runs").iterdir() if not p.name.startswith("index.db")) == []
        second = materialize([watts, watts_below_tdp], instance=instance).run_id
    assert _history(home, monkeypatch) == ([second], 1, [True])


def test_a_process_that_writes_runs_it_does_not_finish_keeps_few_files_open(tmp_path, monkeypatch):
    """The UI's process writes each queued run's first events, and another process its end: only
    the newest few run files it wrote keep a connection."""
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.utils import make_new_run_id

    from pipeline.dagster_storage import KEPT_RUN_FILES

    home = dagster_home(tmp_path / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance:
        for _ in range(KEPT_RUN_FILES + 3):
            run = instance.add_run(DagsterRun(job_name="queued", run_id=make_new_run_id()))
            instance.report_engine_event("queued", run)
        open_files = [p.name for p in (home / "history" / "runs").glob("*.db-wal") if p.name != "index.db-wal"]
        assert len(open_files) == KEPT_RUN_FILES, open_files
