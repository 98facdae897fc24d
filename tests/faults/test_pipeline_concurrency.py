"""Issue 5, item 7: two `wattline run` of one day at once, and `wattline sql` while a run writes.

Real processes (the console script), because the locks under test are per process: the run
lock (`.run.lock`), DuckDB's file locks and the atomic renames of derived files and catalog.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import warehouse
from pipeline.scope import Scope
from tests.builders import DAY
from tests.days import copy_of

DATE = DAY.isoformat()
WATTLINE = str(Path(sys.executable).parent / "wattline")
SECRET = "wattline-fault-test-secret-4f1c9e"
LOCK_ERRORS = ("Traceback", "Could not set lock", "database is locked", "IO Error", "Conflicting lock")


def _derived(data_dir, table):
    """Every part of the day (the cluster-day's, and the fleet-day's where the table has one)."""
    parts = sorted((data_dir / "derived" / table / f"date={DATE}").rglob("*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts], promote_options="permissive")


@pytest.fixture(scope="module")
def built(report_day, tmp_path_factory):
    """A copy of the session's square-wave day (its Dagster instance included): the runs under test write into it."""
    assert report_day.outcome.ok
    return copy_of(report_day, tmp_path_factory.mktemp("concurrency") / "data")


@pytest.mark.slow  # two real `wattline run` processes and a `wattline sql` loop: minutes on 2 cores
def test_two_runs_of_one_day_serialize_and_sql_answers_during_them(built, tmp_path, monkeypatch):
    """Fault: two `wattline run --date D` start together while `wattline sql` queries in a loop.
    Must survive: both runs (exit 0, no lock error shown, the second says it waits), their
    order (Dagster's run records do not overlap), every query (exit 0, always the whole table:
    old or new partition, never a mix or a half-written file), the tables (equal to before).
    Also: a secret in the runs' environment appears in no output and no file they wrote. The
    first run is the whole day (every file a run writes, for the secret); the second rebuilds the
    tables the queries read (power_1s and its fleet-day rollup): the same lock, catalog and
    partition writes, for a fraction of the time."""
    data_dir = built
    before = {t: _derived(data_dir, t) for t in ("power_1s", "fleet_power_1s")}
    expected = (len(before["power_1s"]), sum(before["power_1s"]["samples"].to_pylist()))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), "AWS_SECRET_ACCESS_KEY": SECRET, "WATTLINE_DUCKDB_THREADS": "1"}
    runs = [
        subprocess.Popen([WATTLINE, "run", "--date", DATE, *select, "--data-dir", str(data_dir)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for select in ([], ["--select", "power_1s,fleet_power_1s"])
    ]
    query = "select count(*) as n, sum(samples) as s from power_1s"
    answers, during = [], 0
    while any(r.poll() is None for r in runs) or not answers:
        alive_before = any(r.poll() is None for r in runs)
        q = subprocess.run([WATTLINE, "sql", query, "--format", "csv", "--data-dir", str(data_dir)], env=env, capture_output=True, text=True, timeout=120)
        during += alive_before and any(r.poll() is None for r in runs)
        answers.append((q.returncode, q.stdout.strip().splitlines()[-1] if q.stdout.strip() else "", q.stderr.strip()))
    outputs = [r.communicate(timeout=300) for r in runs]

    for r, (out, err) in zip(runs, outputs, strict=False):
        assert r.returncode == 0, err
        assert not any(word in err for word in LOCK_ERRORS), err
        assert f"{DATE}: " in out
    assert sum("waiting for another run" in err for _, err in outputs) <= 1
    assert during >= 1, "no query ran while a run was in progress: the test proved nothing"
    assert all(a == (0, f"{expected[0]},{expected[1]}", "") for a in answers), answers
    assert not any(word in a[2] for a in answers for word in LOCK_ERRORS)

    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    # The instance's dagster.yaml reads DAGSTER_HOME: this data dir's, not whichever day this process ran last.
    monkeypatch.setenv("DAGSTER_HOME", str(data_dir / ".dagster"))
    with DagsterInstance.from_config(str(data_dir / ".dagster")) as instance:
        records = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS]), order_by="create_timestamp", ascending=True)[-4:]
    assert len(records) == 4  # each `wattline run`: the cluster-day c0, then the fleet-day
    assert [r.dagster_run.job_name for r in records] == ["cluster_day_job", "fleet_day_job"] * 2
    assert records[1].end_time <= records[2].start_time, "the two runs overlapped"

    for table, old in before.items():
        assert _derived(data_dir, table).to_pylist() == old.to_pylist(), table
    for out, err in outputs:
        assert SECRET not in out + err
    leaked = [p for p in data_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_reader_never_sees_a_partition_file_being_written(built, monkeypatch):
    """Fault: a reader globs a derived table at the instant a writer has finished its
    temporary file but not yet renamed it (DuckDB's glob matches dot-files). Must survive: the
    reader's count (the old partition only, not old + new)."""
    data_dir = built
    glob = str(data_dir / "derived" / "power_1s" / "date=*" / "**" / "*.parquet")
    before = duckdb.sql(f"select count(*) from read_parquet('{glob}', hive_partitioning = false)").fetchall()[0][0]
    seen = []
    real_replace = warehouse.os.replace

    def replace_and_look(src, dst):
        seen.append(duckdb.sql(f"select count(*) from read_parquet('{glob}', hive_partitioning = false)").fetchall()[0][0])
        return real_replace(src, dst)

    monkeypatch.setattr(warehouse.os, "replace", replace_and_look)
    with warehouse.compute_connection(data_dir, DATE) as con:
        warehouse.write_partition(
            con,
            data_dir,
            "power_1s",
            DATE,
            f"SELECT * FROM read_parquet('{glob}', hive_partitioning = false) ORDER BY host, gpu, ts",
            Scope(date=DATE, cluster="c0"),
        )
    assert seen == [before]


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from pipeline import warehouse
from pipeline.scope import Scope
data_dir, date, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
real_replace = os.replace
def replace(src, dst):
    if Path(dst).name == point:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)
os.replace = replace
scope = Scope(date=date, cluster="c0")
with warehouse.compute_connection(data_dir, date, scope=scope) as con:
    warehouse.write_partition(con, data_dir, "power_1s", date, "SELECT * FROM power_1s", scope)
warehouse.publish(data_dir)
"""


@pytest.mark.parametrize("point", ["part-0.parquet", "warehouse.duckdb"], ids=["partition-rename", "catalog-rename"])
def test_writer_killed_before_its_rename_corrupts_nothing(built, point):
    """Fault: SIGKILL of a writer at the worst instant: its temporary file is complete, the
    rename not done (partition file, then catalog). Must survive: the table (same bytes as
    before), `sql` (answers), and the next run's disk (old leftovers are removed)."""
    import os

    from pipeline.readonly import run_query

    data_dir = built
    before = _derived(data_dir, "power_1s")
    child = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(data_dir), DATE, point], capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    assert _derived(data_dir, "power_1s").to_pylist() == before.to_pylist()  # old file, or the new one: same rows
    assert run_query(data_dir, "select count(*) as n from power_1s").to_pylist() == [{"n": len(before)}]
    leftovers = [p for p in data_dir.rglob(".tmp-*") if "/power/" not in str(p)]
    assert len(leftovers) == 1
    assert warehouse.remove_stale_tmp(data_dir) == []  # young: could be a live writer's
    os.utime(leftovers[0], (time.time() - 7200, time.time() - 7200))
    assert warehouse.remove_stale_tmp(data_dir) == leftovers
