"""training_energy on a constructed job: known step, collective and checkpoint levels, with and
without job events."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import JOB_EVENTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table

DATE = DAY.isoformat()
ASSETS = ["power_1s", "power_100ms", "training_energy"]
STEP_W, COMM_W, CKPT_W = 700.0, 150.0, 120.0
TOKENS = 1000


def _timeline(iterations=60):
    """Per iteration: 1.5 s step, 0.5 s comm_wait, and after every 10th a 3 s checkpoint. 100 ms slots."""
    events, levels, t = [], [], 0
    for i in range(iterations):
        for kind, slots, w in (("step", 15, STEP_W), ("comm_wait", 5, COMM_W)) + ((("checkpoint", 30, CKPT_W),) if i % 10 == 9 else ()):
            events.append((i, kind, t, t + slots))
            levels += [w] * slots
            t += slots
    return events, np.array(levels)


def _events_table(host, events) -> pa.Table:
    t0 = day_start_ns()
    ts = lambda slots: pa.array([t0 + s * 100_000_000 for s in slots], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    return pa.table({
        "job": ["job-a"] * len(events), "host": [host] * len(events),
        "step": pa.array([e[0] for e in events], pa.int64()), "kind": [e[1] for e in events],
        "start_ts": ts([e[2] for e in events]), "end_ts": ts([e[3] for e in events]),
        "tokens": pa.array([TOKENS if e[1] == "step" else None for e in events], pa.int64()),
    }, schema=JOB_EVENTS)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """job-a on train-0 (2 GPUs) logs events; job-b on train-1 runs the same timeline and logs none."""
    data_dir = tmp_path_factory.mktemp("training") / "data"
    data_dir.mkdir()
    hosts = [{"name": f"train-{i}", "role": "training", "gpus": [{"index": g, "tdp_w": 700} for g in range(2)],
              "jobs": [{"name": f"job-{'ab'[i]}", "gpus": [0, 1]}]} for i in range(2)]
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": hosts}]}]}), data_dir / "inventory.yaml")
    events, levels = _timeline()
    t = day_start_ns() + np.arange(len(levels), dtype=np.int64) * 100_000_000
    for host in ("train-0", "train-1"):
        for gpu in range(2):
            write_dataset(power_table(host, gpu, t, levels), data_dir, "power", prefix=f"{host}-{gpu}")
    write_dataset(_events_table("train-0", events), data_dir, "job_events", prefix="ev")
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", read_day(data_dir, "training_energy", DATE))
    return con, outcome, events, levels


def test_from_job_events(built):
    con, _, events, levels = built
    rows = {r[0]: r[1:] for r in con.execute(
        "select boundary_kind, steps, median_step_s, j_per_step, j_per_token, step_mean_w, gap_mean_w, gap_energy_share, "
        "gap_time_share, kind_mean_w, boundary_drop_median_w, boundary_drop_max_w, source from t where job = 'job-a'"
    ).fetchall()}
    assert set(rows) == {"comm_wait", "checkpoint"}
    steps, median_s, j_step, j_token, step_w, gap_w, e_share, t_share, kind_w, drop_med, drop_max, source = rows["comm_wait"]
    energy = 2 * levels.sum() * 0.1  # both GPUs, every slot inside an event
    gap_slots = (levels < STEP_W).sum()
    assert (steps, median_s, source) == (60, pytest.approx(2.0), "job_events")
    assert j_step == pytest.approx(energy / 60) and j_token == pytest.approx(energy / (60 * TOKENS))
    assert step_w == pytest.approx(STEP_W) and kind_w == pytest.approx(COMM_W)
    assert gap_w == pytest.approx(levels[levels < STEP_W].mean())
    assert e_share == pytest.approx(levels[levels < STEP_W].sum() / levels.sum())
    assert t_share == pytest.approx(gap_slots / len(levels))
    assert drop_med == pytest.approx(2 * (STEP_W - COMM_W)) and drop_max == pytest.approx(2 * (STEP_W - COMM_W))
    ckpt = rows["checkpoint"]
    assert ckpt[8] == pytest.approx(CKPT_W) and ckpt[9] == pytest.approx(2 * (COMM_W - CKPT_W))


def test_from_power_only(built):
    con, outcome, _, levels = built
    steps, median_s, step_w, gap_w, kind, drop_med, source, j_token = con.execute(
        "select steps, median_step_s, step_mean_w, gap_mean_w, boundary_kind, boundary_drop_median_w, source, j_per_token from t where job = 'job-b'"
    ).fetchone()
    assert (steps, kind, source, j_token) == (60, "power_drop", "power", None)
    assert median_s == pytest.approx(2.0) and step_w == pytest.approx(STEP_W)
    assert gap_w == pytest.approx(levels[levels < STEP_W].mean())
    assert drop_med == pytest.approx(2 * (STEP_W - COMM_W))
    # job-a logs events and job-b does not: a logger is down somewhere.
    warned = {c.check for c in outcome.failed_checks if c.asset == "training_energy"}
    assert warned == {"events_cover_jobs"}
