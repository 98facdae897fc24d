"""A training run that crosses midnight holds its GPUs on both days: job_events files go by the
day an event starts, so the event running from 23:55 to 00:05 is in yesterday's partition; the day's
computation reads it too (the previous day's events that end after midnight), and the run it
starts holds the GPU from 00:00 on."""

import datetime as dt

import pyarrow as pa
import pytest

from collectors.contract import JOB_EVENTS
from collectors.parquet_sink import write_dataset
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope
from tests.builders import DAY, day_start_ns
from tests.noon_split import _inventory

MIDNIGHT_NS = day_start_ns()
MIN_NS = 60 * 10**9
YESTERDAY = (DAY - dt.timedelta(days=1)).isoformat()


def _events(d):
    """job-a: 23:50–23:55 and 23:55–00:05 (yesterday's partition), 00:05–00:10 (today's);
    job-b: 22:00–23:00 (yesterday, over before midnight) and 00:20–00:30 (today)."""
    rows = [("job-a", -10, -5), ("job-a", -5, 5), ("job-a", 5, 10), ("job-b", -120, -60), ("job-b", 20, 30)]
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    write_dataset(pa.table({
        "job": [r[0] for r in rows], "host": ["train-0"] * len(rows), "step": pa.array(range(len(rows)), pa.int64()),
        "kind": ["step"] * len(rows), "start_ts": ts([MIDNIGHT_NS + r[1] * MIN_NS for r in rows]),
        "end_ts": ts([MIDNIGHT_NS + r[2] * MIN_NS for r in rows]), "tokens": pa.array([1000] * len(rows), pa.int64()),
    }, schema=JOB_EVENTS), d, "job_events")


def _held(d, day, scope=None):
    with WarehouseResource(data_dir=str(d)).connection(scope or day) as con:
        return con.execute("SELECT name, from_ns, to_ns FROM gpu_assignments WHERE host = 'train-0' AND gpu = 0 "
                           "ORDER BY from_ns").fetchall()


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    _inventory(d, endpoints=False)  # job-a and job-b both list GPU 0: only their events say who holds it
    _events(d)
    assert sorted(p.parent.name for p in (d / "job_events").rglob("*.parquet")) == [f"date={YESTERDAY}", f"date={DAY.isoformat()}"]
    return d


def test_a_run_that_started_yesterday_holds_its_gpus_today(data_dir):
    today = _held(data_dir, DAY.isoformat())
    assert today == [("job-a", MIDNIGHT_NS - 10 * MIN_NS, MIDNIGHT_NS + 10 * MIN_NS),
                     ("job-b", MIDNIGHT_NS + 20 * MIN_NS, MIDNIGHT_NS + 30 * MIN_NS)]
    cluster_day = _held(data_dir, None, Scope(date=DAY.isoformat(), cluster="c0"))
    assert cluster_day == today


def test_yesterday_holds_its_own_part_of_the_run(data_dir):
    assert _held(data_dir, YESTERDAY) == [("job-b", MIDNIGHT_NS - 120 * MIN_NS, MIDNIGHT_NS - 60 * MIN_NS),
                                          ("job-a", MIDNIGHT_NS - 10 * MIN_NS, MIDNIGHT_NS + 5 * MIN_NS)]
