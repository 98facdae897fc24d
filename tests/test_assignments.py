"""GPUs that change hands: one GPU serves endpoint (or job) A until 12:00 and B after, told by each
assignment source (the inventory's timed assignments, a site's file, training job_events, and
Prometheus's dcgm-exporter pod labels), and each workload gets exactly its own energy."""

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import JOB_EVENTS
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.cli_util import invoke
from tests.noon_split import ASSETS, NOON_NS, UUID, _check_split, _energy, _inventory, _power, _power_day


@pytest.mark.slow  # runs the daily job on a day of its own
def test_inventory_timed_assignment_splits_the_gpu_at_noon(tmp_path):
    d = tmp_path / "data"
    _inventory(d, assignments=[{"host": "infer-0", "gpu": 0, "endpoint": "ep-b", "from_ts": dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC)}])
    t, w = _power_day(d)
    out = run_day(d, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert out.success, out.error
    _check_split(d, t, w)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_assignments_file_by_uuid_splits_the_gpu_at_noon(tmp_path):
    d = tmp_path / "data"
    _inventory(d)
    t, w = _power_day(d)
    f = tmp_path / "held.csv"
    noon = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC).isoformat().replace("+00:00", "Z")
    f.write_text(f"gpu_uuid,kind,name,from_ts,to_ts\n{UUID},endpoint,ep-b,{noon},\n{UUID},endpoint,nobody,{noon},\n")
    out = invoke("import", "assignments", str(f), "--data-dir", str(d))
    assert out.exit_code == 0, out.output
    assert "1 assignment(s) stored, 1 set aside" in out.output
    out = run_day(d, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert out.success, out.error
    _check_split(d, t, w)


def test_two_explicit_sources_that_disagree_are_an_error_naming_both(tmp_path):
    d = tmp_path / "data"
    _inventory(d)
    noon = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC).isoformat()
    f = tmp_path / "one.csv"
    f.write_text(f"host,gpu,kind,name,from_ts\ninfer-0,0,endpoint,ep-b,{noon}\n")
    assert invoke("import", "assignments", str(f), "--data-dir", str(d)).exit_code == 0
    g = tmp_path / "two.csv"
    g.write_text(f"host,gpu,kind,name,from_ts\ninfer-0,0,endpoint,ep-a,{noon}\n")
    out = invoke("import", "assignments", str(g), "--data-dir", str(d))
    assert out.exit_code == 2
    assert out.output.count("error:") == 1 and "ep-a" in out.output and "ep-b" in out.output
    assert len(list((d / "assignments").glob("*.parquet"))) == 1  # nothing written


@pytest.mark.slow  # runs the daily job on a day of its own
def test_job_events_move_a_gpu_between_jobs_at_noon(tmp_path):
    d = tmp_path / "data"
    _inventory(d, endpoints=False)
    t, w = _power()
    write_dataset(power_table("train-0", 0, t, w), d, "power")
    rows = []
    for job, base in (("job-a", t[0]), ("job-b", NOON_NS)):
        end = NOON_NS if job == "job-a" else int(t[-1])
        edges = np.linspace(base, end, 11).astype(np.int64)
        for k in range(10):
            rows.append((job, "train-0", k, "step", int(edges[k]), int(edges[k + 1]), 1000))
    cols = list(zip(*rows, strict=True))
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    write_dataset(pa.table({"job": cols[0], "host": cols[1], "step": pa.array(cols[2], pa.int64()), "kind": cols[3],
                            "start_ts": ts(cols[4]), "end_ts": ts(cols[5]), "tokens": pa.array(cols[6], pa.int64())},
                           schema=JOB_EVENTS), d, "job_events")
    run_day(d, DAY.isoformat(), selection=["power_1s", "energy_curve", "power_100ms", "training_energy"], fleet_day=False)
    con = duckdb.connect()
    con.register("te", read_day(d, "training_energy", DAY.isoformat()))
    got = dict(con.execute("SELECT job, any_value(j_per_step * steps) FROM te GROUP BY 1").fetchall())
    want = {"job-a": _energy(t, w, t[0], NOON_NS), "job-b": _energy(t, w, NOON_NS, t[-1])}
    for job in want:
        assert got[job] == pytest.approx(want[job], rel=1e-6), (got, want)


def test_a_gpu_two_workloads_list_has_no_default_owner(tmp_path):
    """Listed by two endpoints, a GPU is held by neither until an assignment says which (no guess)."""
    from pipeline.warehouse import compute_connection

    d = tmp_path / "data"
    _inventory(d, endpoints=False)
    with compute_connection(d, DAY.isoformat()) as con:
        assert con.execute("SELECT job FROM inventory_gpus WHERE gpu = 0").fetchall() == [(None,)]
        assert con.execute("SELECT count(*) FROM gpu_assignments WHERE gpu = 0").fetchall() == [(0,)]


def _job_events(d, runs):
    """Ten steps per (job, start ns, end ns) run on train-0."""
    rows = []
    for job, lo, hi in runs:
        edges = np.linspace(lo, hi, 11).astype(np.int64)
        for k in range(10):
            rows.append((job, "train-0", k, "step", int(edges[k]), int(edges[k + 1]), 1000))
    cols = list(zip(*rows, strict=True))
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    write_dataset(pa.table({"job": cols[0], "host": cols[1], "step": pa.array(cols[2], pa.int64()), "kind": cols[3],
                            "start_ts": ts(cols[4]), "end_ts": ts(cols[5]), "tokens": pa.array(cols[6], pa.int64())},
                           schema=JOB_EVENTS), d, "job_events")


@pytest.mark.slow  # runs the daily job on a day of its own
def test_power_on_a_gpu_nobody_holds_is_a_warn_naming_the_gpu_and_hours(tmp_path):
    """job-b starts 5 min after job-a ends: the GPU draws power for 300 s that no job gets."""
    d = tmp_path / "data"
    _inventory(d, endpoints=False)
    t, w = _power()
    write_dataset(power_table("train-0", 0, t, w), d, "power")
    _job_events(d, [("job-a", int(t[0]), NOON_NS), ("job-b", NOON_NS + 300 * 10**9, int(t[-1]) + 10**8)])
    out = run_day(d, DAY.isoformat(), selection=["power_1s"], fleet_day=False)
    assert out.success, out.error
    failed = {c.check: c for c in out.failed_checks}
    assert failed["gpus_held"].severity == "WARN"
    assert "1 GPU(s) draw power while no endpoint or job holds them" in failed["gpus_held"].description
    assert "train-0/0 in hour(s) 12 UTC" in failed["gpus_held"].description
    from pipeline.warehouse import compute_connection

    with compute_connection(d, DAY.isoformat()) as con:
        sql = (Path(__file__).parents[1] / "sql" / "power_1s" / "checks" / "gpus_held.sql").read_text()
        (row,) = con.execute(sql).fetchall()
    assert row[1:4] == ("train-0", 0, 300)  # the 300 s between the two jobs, and nothing else
    assert row[4] == pytest.approx(_energy(t, w, NOON_NS, NOON_NS + 300 * 10**9), rel=1e-3)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_gpu_held_all_day_raises_no_warn(tmp_path):
    d = tmp_path / "data"
    _inventory(d)  # ep-a lists GPU 0 on infer-0 all day
    t, w = _power()
    write_dataset(power_table("infer-0", 0, t, w), d, "power")
    out = run_day(d, DAY.isoformat(), selection=["power_1s"], fleet_day=False)
    assert out.success, out.error
    assert "gpus_held" not in {c.check for c in out.failed_checks}
