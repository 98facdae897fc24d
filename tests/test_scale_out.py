"""Day × cluster partitions: a day built by 2 worker processes equals the single-process build;
the fleet-day rollups equal the same numbers computed from per-GPU data; the fleet-day needs
neither raw samples nor per-GPU tables."""

from __future__ import annotations

import dataclasses
import shutil

import duckdb
import pyarrow.compute as pc
import pytest
from dagster import DagsterInstance, RunsFilter

from collectors.settings import DEFAULT_GRID_STEP_MS, DUCKDB_MEMORY_ENV, DUCKDB_THREADS_ENV, GRID_STEP_MS_ENV, load
from pipeline import warehouse
from pipeline.runner import dagster_home, run_day
from tests.days import builds_a_day
from tests.scale_out_fleet import DAY, copy_raw, simulate_four_clusters

DATE = DAY.isoformat()
CLUSTERS = ["c-train", "c-infer-0", "c-infer-1", "c-mixed"]


@pytest.fixture(scope="module")
@builds_a_day
def builds(tmp_path_factory):
    """The same raw data built once by one process (its settings from the environment) and once by
    two worker processes given the settings as a value, while the environment holds a memory bound
    DuckDB refuses and a grid step of 20 ms: a worker that read the environment would fail or build
    another grid (tests/test_settings_values.py: settings are values)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(DUCKDB_THREADS_ENV, "1")  # one thread per DuckDB: sums in one order, bit-identical
    mp.delenv(GRID_STEP_MS_ENV, raising=False)
    root = tmp_path_factory.mktemp("scale-out")
    raw = simulate_four_clusters(root / "raw")
    one = copy_raw(raw, root / "one")
    two = copy_raw(raw, root / "two")
    single = run_day(one, DATE, workers=1)
    settings = dataclasses.replace(load(), data_dir=str(two), duckdb_memory="400MB")
    assert settings.grid_step_ms == DEFAULT_GRID_STEP_MS
    mp.setenv(DUCKDB_MEMORY_ENV, "not-a-size")
    mp.setenv(GRID_STEP_MS_ENV, "20")
    parallel = run_day(two, DATE, workers=2, settings=settings)
    mp.undo()
    return one, single, two, parallel


def _tables(data_dir):
    return warehouse.derived_tables(data_dir)


def _rows(data_dir, table):
    con = duckdb.connect()
    rows = con.execute(f"SELECT * FROM read_parquet('{data_dir}/derived/{table}/**/*.parquet', hive_partitioning = false)").fetchall()
    return sorted(rows, key=repr)


def test_every_cluster_day_and_the_fleet_day_ran(builds):
    one, single, two, parallel = builds
    for outcome in (single, parallel):
        assert outcome.success and outcome.ok, outcome.error or outcome.error_checks
        assert len(outcome.run_ids) == len(CLUSTERS) + 1
        assert outcome.materialized.count("power_1s") == len(CLUSTERS)
        assert outcome.materialized[-1] == "daily_report"
    for cluster in CLUSTERS:
        assert (one / "derived" / "power_1s" / f"date={DATE}" / f"cluster={cluster}" / "part-0.parquet").is_file()
    assert (one / "derived" / "swing_stats" / f"date={DATE}" / "part-0.parquet").is_file()  # the fleet-day part


def test_two_workers_give_tables_identical_to_one_process(builds):
    one, _, two, _ = builds
    assert _tables(one) == _tables(two)
    assert len(_tables(one)) >= 18
    for table in _tables(one):
        assert _rows(one, table) == _rows(two, table), table


def test_run_day_with_two_workers_takes_the_settings_it_is_given(builds):
    """The two workers built every table as the single process did (above) on the grid step of
    the settings they were given (the default: no fleet_power_grid rows, swings on the 100 ms
    slots), not the environment's 20 ms, with the given DuckDB bound (the environment's would
    fail their connections)."""
    _, _, two, parallel = builds
    assert parallel.success, parallel.error
    steps = warehouse.read_day(two, "swing_stats", DATE).filter(pc.field("level") != "gpu").column("grid_step_ms").to_pylist()
    assert steps and set(steps) == {DEFAULT_GRID_STEP_MS}
    assert warehouse.read_day(two, "fleet_power_grid", DATE).num_rows == 0


def test_two_workers_ran_cluster_days_at_the_same_time(builds):
    _, _, two, parallel = builds
    with DagsterInstance.from_config(str(dagster_home(two))) as instance:
        records = instance.get_run_records(RunsFilter(run_ids=parallel.run_ids))
    spans = sorted((r.start_time, r.end_time) for r in records if r.dagster_run.job_name == "cluster_day_job")
    assert len(spans) == len(CLUSTERS)
    assert any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)), spans


def _con(data_dir):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    warehouse.create_views(con, data_dir)
    con.execute(f"SET VARIABLE partition_date = DATE '{DATE}'")
    return con


def test_role_and_fleet_rollups_equal_sums_of_per_gpu_data(builds):
    one, *_ = builds
    con = _con(one)
    off = con.execute(
        """
        WITH direct AS (
            SELECT p.ts, i.role AS entity, sum(p.mean_w) AS w, sum(p.energy_j) AS j, count(*) AS n
            FROM power_1s AS p JOIN inventory_gpus AS i USING (host, gpu) GROUP BY ALL
            UNION ALL
            SELECT p.ts, i.fleet, sum(p.mean_w), sum(p.energy_j), count(*)
            FROM power_1s AS p JOIN inventory_gpus AS i USING (host, gpu) GROUP BY ALL
        )
        SELECT d.entity, d.ts, d.w, f.power_w, d.n, f.gpus_reporting
        FROM direct AS d
        FULL JOIN (SELECT * FROM fleet_power_1s WHERE level IN ('role', 'fleet')) AS f USING (entity, ts)
        WHERE f.power_w IS NULL OR d.w IS NULL OR abs(d.w - f.power_w) > 1e-3 * d.w OR d.n <> f.gpus_reporting
           OR abs(d.j - f.energy_j) > 1e-6 * d.j + 1e-6
        """
    ).fetchall()
    assert off == []
    levels = dict(con.execute("SELECT level, count(DISTINCT entity) FROM fleet_power_100ms GROUP BY ALL").fetchall())
    # 2 training (c-train, c-mixed) + 3 inference (c-infer-0, c-infer-1, c-mixed) cluster parts
    assert levels == {"host": 7, "cluster": 4, "cluster_role": 5, "role": 2, "fleet": 1}


def test_fleet_shares_and_coincidence_equal_the_per_gpu_formulas(builds):
    one, *_ = builds
    con = _con(one)
    direct = dict(con.execute(
        """SELECT i.role, avg((g.power_w > i.tdp_w)::INT + 0.0) FROM power_100ms AS g
           JOIN inventory_gpus AS i USING (host, gpu) GROUP BY ALL"""
    ).fetchall())
    rolled = dict(con.execute("SELECT entity, above_tdp_share FROM power_summary WHERE level = 'role'").fetchall())
    assert rolled.keys() == direct.keys() == {"training", "inference"}
    for role, share in direct.items():
        assert rolled[role] == pytest.approx(share, abs=1e-6)
    sum_of_max, fleet_max = con.execute(
        """SELECT (SELECT sum(m) FROM (SELECT max(mean_w) AS m FROM power_1s GROUP BY host, gpu)),
                  (SELECT max(power_w) FROM fleet_power_1s WHERE level = 'fleet' AND gpus_reporting = gpus_total)"""
    ).fetchone()
    factor = con.execute("SELECT coincidence_factor FROM coincidence WHERE level = 'fleet'").fetchone()[0]
    assert factor == pytest.approx(fleet_max / sum_of_max, rel=1e-5)
    pairs = con.execute("SELECT count(*), min(pearson_1s), max(pearson_1s) FROM cluster_correlation").fetchone()
    assert pairs[0] == len(CLUSTERS) * (len(CLUSTERS) - 1) and -1 <= pairs[1] <= pairs[2] <= 1


@pytest.mark.slow  # runs the daily job on a day of its own
def test_the_fleet_day_needs_no_raw_samples_and_no_per_gpu_table(builds, tmp_path, monkeypatch):
    one, *_ = builds
    shutil.copytree(one, tmp_path / "d", ignore=shutil.ignore_patterns(".dagster", "*.lock"))
    d = tmp_path / "d"
    monkeypatch.setenv("WATTLINE_DUCKDB_THREADS", "1")  # as the build: sums in the same order
    fleet_tables = ["fleet_power_1s", "fleet_power_100ms", "swing_stats", "power_summary", "coincidence", "cluster_correlation"]
    before = {t: _rows(d, t) for t in fleet_tables}
    shutil.rmtree(d / "power")
    shutil.rmtree(d / "derived" / "power_1s")
    shutil.rmtree(d / "derived" / "power_100ms")
    for t in fleet_tables:  # drop the fleet-day parts, keep the cluster-days'
        (d / "derived" / t / f"date={DATE}" / "part-0.parquet").unlink(missing_ok=True)
    outcome = run_day(d, DATE, selection=[f"fleet/{t}" for t in fleet_tables[:-1]] + ["cluster_correlation"], workers=1)
    assert outcome.success, outcome.error
    assert all(not k.startswith(("power_1s", "power_100ms")) for k in outcome.materialized)
    for t in fleet_tables:
        assert _rows(d, t) == before[t], t


@pytest.mark.slow  # runs the daily job on a day of its own
def test_the_fleet_day_follows_its_cluster_days_by_itself(tmp_path, monkeypatch):
    """The fleet-day's automation condition: nothing to do before the cluster-days; once they
    are built, every fleet-day asset of that day is requested, and nothing of another day."""
    import datetime as dt

    from dagster import evaluate_automation_conditions

    from pipeline.definitions import build_definitions
    from tests.builders import write_square_fleet

    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=60)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(data_dir)))
    defs = build_definitions(str(data_dir))
    when = dt.datetime.fromisoformat(f"{DATE}T00:00:00+00:00") + dt.timedelta(days=1, hours=2)
    with DagsterInstance.from_config(str(dagster_home(data_dir))) as instance:
        first = _off_loop(evaluate_automation_conditions, defs=defs, instance=instance, evaluation_time=when)
        assert first.total_requested == 0
    assert run_day(data_dir, DATE, fleet_day=False).success
    with DagsterInstance.from_config(str(dagster_home(data_dir))) as instance:
        second = _off_loop(evaluate_automation_conditions, defs=defs, instance=instance, cursor=first.cursor, evaluation_time=when)
    fleet_keys = defs.resolve_job_def("fleet_day_job").asset_layer.selected_asset_keys
    assert {k: second.get_requested_partitions(k) for k in fleet_keys} == {k: {DATE} for k in fleet_keys}
    assert second.total_requested == len(fleet_keys)  # the fleet-day's assets of that day, nothing else


def _off_loop(fn, **kwargs):
    """Dagster's evaluator calls asyncio.run(): keep it off any event loop an earlier test
    (Playwright) left running in this thread."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, **kwargs).result()


def test_default_workers_leave_each_at_least_its_memory(monkeypatch):
    from pipeline import runner

    monkeypatch.delenv("WATTLINE_WORKERS", raising=False)
    monkeypatch.delenv("WATTLINE_DUCKDB_MEMORY", raising=False)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 2560)
    assert runner.default_workers(4, load()) == 1  # two would get 1.25 GiB each: too little for a 64-GPU cluster-day
    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 8192)
    assert runner.default_workers(8, load()) == 4
    assert runner.default_workers(2, load()) == 2
    monkeypatch.setenv("WATTLINE_DUCKDB_MEMORY", "2GB")  # each worker gets 2 GB: only cores and clusters limit
    assert runner.default_workers(8, load()) == 8
    monkeypatch.setenv("WATTLINE_WORKERS", "3")
    assert runner.default_workers(8, load()) == 3
