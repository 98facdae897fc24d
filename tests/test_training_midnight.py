"""training_energy for events that cross midnight or last days: job_events files go by the day an
event starts, so each day also reads the earlier days' events still running into it
($WATTLINE_JOB_EVENTS_LOOKBACK_DAYS back) and counts the part of each event inside the day; a step
and its tokens count on the day the step ends."""

import datetime as dt

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import JOB_EVENTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from collectors.settings import JOB_EVENTS_LOOKBACK_DAYS_ENV, Settings, job_events_lookback_days, load
from pipeline import remote
from pipeline.resources import WarehouseResource
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests import test_sql_as_is as as_is
from tests.builders import DAY, day_start_ns, power_table
from tests.test_power_training import trapezoid_between

ASSETS = ["power_1s", "energy_curve", "power_100ms", "training_energy"]
MIDNIGHT_NS = day_start_ns()
S = 10**9
YESTERDAY = DAY - dt.timedelta(days=1)
TOKENS = 1000


def _inventory(d, jobs=("job-a",)):
    """train-0 with GPU 0 listed for ``jobs`` (with two, only job events say which holds it when)."""
    hosts = [{"name": "train-0", "role": "training", "gpus": [{"index": 0, "tdp_w": 700}], "jobs": [{"name": j, "gpus": [0]} for j in jobs]}]
    d.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": hosts}]}]}), d / "inventory.yaml")


def _events(d, rows):
    """rows: (step, kind, start ns, end ns) of job-a on train-0; write_dataset files each by its start's day."""
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    write_dataset(pa.table({
        "job": ["job-a"] * len(rows), "host": ["train-0"] * len(rows), "step": pa.array([r[0] for r in rows], pa.int64()),
        "kind": [r[1] for r in rows], "start_ts": ts([r[2] for r in rows]), "end_ts": ts([r[3] for r in rows]),
        "tokens": pa.array([TOKENS if r[1] == "step" else None for r in rows], pa.int64()),
    }, schema=JOB_EVENTS), d, "job_events")


def _power(d, t_ns):
    """A power that changes every sample (not a constant a wrong split could still get right)."""
    p = 400.0 + 200.0 * np.sin(np.arange(len(t_ns)) / 3.0)
    write_dataset(power_table("train-0", 0, t_ns, p), d, "power", prefix="train-0")
    return p


def _day_rows(d, day):
    outcome = run_day(d, day.isoformat(), selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", read_day(d, "training_energy", day.isoformat()))
    return con.execute("SELECT any_value(steps), any_value(j_per_step), any_value(j_per_token), any_value(power_coverage), "
                       "any_value(source) FROM t WHERE job = 'job-a'").fetchone()


@pytest.mark.slow  # runs the daily job on a day of its own
def test_an_event_across_midnight_splits_its_energy_between_the_days(tmp_path):
    """A step 23:59:58.037–00:00:03.037 (sampled every 250 ms, 100 ms off the event's edges) between
    two steps that lie inside each day: each day has its own part of the crossing step's energy
    (exact trapezoid over the clipped interval), the two parts add up to the whole step's energy
    (1e-6 relative), and the step with its tokens counts on the day it ends."""
    d = tmp_path / "data"
    _inventory(d)
    t = MIDNIGHT_NS + np.arange(-60 * 4, 60 * 4, dtype=np.int64) * (S // 4) + 137_000_000
    p = _power(d, t)
    off = 37_000_000
    steps = [(0, "step", MIDNIGHT_NS - 20 * S + off, MIDNIGHT_NS - 10 * S + off),
             (1, "step", MIDNIGHT_NS - 2 * S + off, MIDNIGHT_NS + 3 * S + off),
             (2, "step", MIDNIGHT_NS + 10 * S + off, MIDNIGHT_NS + 20 * S + off)]
    _events(d, steps)
    mine = t < MIDNIGHT_NS  # each day's energy_curve is its own samples
    y_ref = lambda a, b: trapezoid_between(t[mine], p[mine], a, b)  # noqa: E731
    t_ref = lambda a, b: trapezoid_between(t[~mine], p[~mine], a, b)  # noqa: E731
    before = y_ref(steps[0][2], steps[0][3]) + y_ref(steps[1][2], MIDNIGHT_NS)
    after = t_ref(MIDNIGHT_NS, steps[1][3]) + t_ref(steps[2][2], steps[2][3])
    assert t_ref(MIDNIGHT_NS, steps[1][3]) > 1000  # today's share of the crossing step is real energy

    y_steps, y_j_step, y_j_token, y_cov, _ = _day_rows(d, YESTERDAY)
    t_steps, t_j_step, t_j_token, t_cov, source = _day_rows(d, DAY)
    assert (y_steps, t_steps, source) == (1, 2, "job_events")
    assert y_j_step * y_steps == pytest.approx(before, rel=1e-6)
    assert t_j_step * t_steps == pytest.approx(after, rel=1e-6)
    assert y_j_token == pytest.approx(before / TOKENS, rel=1e-6) and t_j_token == pytest.approx(after / (2 * TOKENS), rel=1e-6)
    # the two days' parts are the whole step's energy over the samples (the sample interval that
    # straddles midnight, 23:59:59.887–00:00:00.137, is in neither day's curve: power_coverage says so)
    crossing = y_ref(steps[1][2], MIDNIGHT_NS) + t_ref(MIDNIGHT_NS, steps[1][3])
    whole = y_ref(steps[0][2], steps[0][3]) + crossing + t_ref(steps[2][2], steps[2][3])
    assert y_j_step * y_steps + t_j_step * t_steps == pytest.approx(whole, rel=1e-6)
    assert crossing == pytest.approx(trapezoid_between(t, p, steps[1][2], steps[1][3]) - trapezoid_between(t, p, t[mine][-1], t[~mine][0]), rel=1e-9)
    assert y_cov == pytest.approx(1 - 0.113 / 11.963, rel=1e-6) and t_cov == pytest.approx(1 - 0.137 / 13.037, rel=1e-6)
    # the file run as-is on the read-only catalog: the same rows (yesterday's crossing step from the
    # catalog's job_events_earlier, the spans from power_runs('job'))
    con = duckdb.connect(str(d / "warehouse.duckdb"), read_only=True)
    try:
        got = as_is.run_as_is(con, "training_energy", DAY.isoformat())
    finally:
        con.close()
    want = read_day(d, "training_energy", DAY.isoformat())
    assert got.num_rows == want.num_rows > 0 and as_is.rows_apart(got, want.cast(got.schema)) == (0, 0)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_an_event_across_midnight_on_a_day_without_power_is_null_not_zero(tmp_path):
    """The crossing step's GPU has power only before midnight: today keeps the job's row (its step
    ends today) with power_coverage 0 and energies NULL, never 0 J."""
    d = tmp_path / "data"
    _inventory(d)
    t = MIDNIGHT_NS - np.arange(60 * 4, 0, -1, dtype=np.int64) * (S // 4)
    _power(d, t)
    _events(d, [(1, "step", MIDNIGHT_NS - 2 * S, MIDNIGHT_NS + 3 * S)])
    steps, j_step, j_token, coverage, source = _day_rows(d, DAY)
    assert (steps, j_step, j_token, coverage, source) == (1, None, None, 0.0, "job_events")


def _held(d, day, settings: Settings | None = None):
    with WarehouseResource.from_settings(settings or Settings(), d).connection(day.isoformat()) as con:
        return con.execute("SELECT name, from_ns, to_ns FROM gpu_assignments WHERE host = 'train-0' AND gpu = 0 ORDER BY from_ns").fetchall()


def test_an_event_longer_than_a_day_holds_its_gpus_on_the_third_day(tmp_path, monkeypatch):
    """A row marking a whole run from two days before 20:00 to 00:10 today (28 h 10 min) holds GPU 0
    today: the day reads $WATTLINE_JOB_EVENTS_LOOKBACK_DAYS (default 7) earlier days; with 1 it is
    not seen (the bound is the setting's)."""
    d = tmp_path / "data"
    _inventory(d, jobs=("job-a", "job-b"))
    run = (0, "run", MIDNIGHT_NS - 28 * 3600 * S, MIDNIGHT_NS + 600 * S)
    _events(d, [run])
    assert sorted(p.parent.name for p in (d / "job_events").rglob("*.parquet")) == [f"date={DAY - dt.timedelta(days=2)}"]
    assert _held(d, DAY) == [("job-a", run[2], run[3])]
    assert _held(d, YESTERDAY) == [("job-a", run[2], run[3])]
    monkeypatch.setenv(JOB_EVENTS_LOOKBACK_DAYS_ENV, "1")
    assert _held(d, DAY, load()) == []  # the setting as an entry point resolves it


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_long_event_adds_its_part_inside_each_day(tmp_path):
    """The 28 h run row over power on the last 2 min of yesterday and first 2 min of today: today's
    training_energy has the energy of today's part only, power_coverage the share of today's part
    (00:00–00:10) that had samples."""
    d = tmp_path / "data"
    _inventory(d)
    t = MIDNIGHT_NS + np.arange(-120, 120, dtype=np.int64) * S + S // 2
    p = _power(d, t)
    _events(d, [(0, "run", MIDNIGHT_NS - 28 * 3600 * S, MIDNIGHT_NS + 600 * S)])
    steps, j_step, _, coverage, source = _day_rows(d, DAY)
    assert source == "job_events" and steps is None and j_step is None  # no step events: nothing per step
    con = duckdb.connect()
    con.register("t", read_day(d, "training_energy", DAY.isoformat()))
    kind_w, = con.execute("SELECT kind_mean_w FROM t WHERE job = 'job-a' AND boundary_kind = 'run'").fetchone()
    assert coverage == pytest.approx((t[-1] - t[t > MIDNIGHT_NS][0]) / (600 * S), rel=1e-6)  # 00:00:00.5–00:01:59.5
    today = t > MIDNIGHT_NS
    assert kind_w == pytest.approx(trapezoid_between(t[today], p[today], MIDNIGHT_NS, MIDNIGHT_NS + 600 * S) / 600, rel=1e-6)


@pytest.mark.parametrize("text", ["-1", "367", "a week"])
def test_a_bad_lookback_is_a_clear_error(text):
    with pytest.raises(ValueError, match=r"WATTLINE_JOB_EVENTS_LOOKBACK_DAYS=.*0 to 366 \(default 7\)"):
        job_events_lookback_days(text)


def test_an_s3_cluster_day_stages_the_earlier_days_job_events(monkeypatch):
    """The work dir of an S3 cluster-day holds the job_events folders of the days the day reads back."""
    monkeypatch.setenv(JOB_EVENTS_LOOKBACK_DAYS_ENV, "3")
    assert remote._earlier_days(DAY.isoformat(), load().job_events_lookback_days) == [(DAY - dt.timedelta(days=n)).isoformat() for n in (1, 2, 3)]
