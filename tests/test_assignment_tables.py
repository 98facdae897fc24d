"""Every per-endpoint and per-job table follows a GPU that changes hands: on infer-0, GPU 0 serves
endpoint ep-a until 12:00 and ep-b after (GPU 1 serves ep-c all day); on train-0, GPU 0 runs job-a
until 12:00 and job-b after. Each table's ep-a / job-a rows see only the morning half of the GPU's
power, its ep-b / job-b rows only the afternoon half."""

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pytest

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.cli_util import invoke
from tests.days import builds_a_day
from tests.noon_split import NOON_NS, START_NS, UUID, _energy, _power, _requests

NOON = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC)
TABLES = ["phase_segments", "phase_timeline", "hourly_activity", "endpoint_correlation", "power_cap_whatif"]
ASSETS = ["power_1s", "energy_curve", "power_100ms", "fleet_power_1s", "phase_intervals", *TABLES]


def _inventory(d):
    infer = {"name": "infer-0", "role": "inference",
             "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H100", "uuid": UUID}, {"index": 1, "tdp_w": 700.0}],
             "endpoints": [{"name": "ep-a", "gpus": [0], "model": "small"}, {"name": "ep-b", "gpus": [], "model": "big"},
                           {"name": "ep-c", "gpus": [1], "model": "small"}]}
    train = {"name": "train-0", "role": "training", "gpus": [{"index": 0, "tdp_w": 700.0}],
             "jobs": [{"name": "job-a", "gpus": [0]}, {"name": "job-b", "gpus": []}]}
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [infer, train]}]}],
           "assignments": [{"host": "infer-0", "gpu": 0, "endpoint": "ep-b", "from_ts": NOON},
                           {"host": "train-0", "gpu": 0, "job": "job-b", "from_ts": NOON}]}
    d.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    """The noon-split day, built once: (data dir, DuckDB with each table registered)."""
    d = tmp_path_factory.mktemp("split") / "data"
    _inventory(d)
    t, w = _power()
    write_dataset(power_table("infer-0", 0, t, w), d, "power")
    s = (t - START_NS) / 1e9
    write_dataset(power_table("infer-0", 1, t, 200 + 60 * np.cos(s / 11)), d, "power")
    write_dataset(power_table("train-0", 0, t, w), d, "power")
    _requests(d)
    out = run_day(d, DAY.isoformat(), selection=ASSETS, fleet_day=False)
    assert out.success, out.error
    # ep-a and ep-b never hold a GPU at the same time: no pair of theirs is owed
    assert "all_endpoint_pairs" not in {c.check for c in out.failed_checks}, out.failed_checks
    con = duckdb.connect()
    for table in ["power_1s", *TABLES]:
        con.register(table, read_day(d, table, DAY.isoformat()))
    return d, con


def _halves(con, host="infer-0"):
    """GPU 0's power_1s energy (J) and seconds before and after noon: the independent answer."""
    rows = con.execute(
        "SELECT epoch_ns(ts) < ? AS morning, sum(energy_j), count(*) FROM power_1s WHERE host = ? AND gpu = 0 GROUP BY 1",
        [NOON_NS, host]).fetchall()
    return {("a" if m else "b"): (e, n) for m, e, n in rows}


def test_hourly_activity_endpoint_rows_see_their_own_half(day):
    _, con = day
    half = _halves(con)
    got = dict(((e), (j, n)) for e, j, n in con.execute(
        "SELECT entity, sum(energy_j), sum(seconds) FROM hourly_activity WHERE entity LIKE 'ep-%' GROUP BY 1").fetchall())
    for ep, h in (("ep-a", "a"), ("ep-b", "b")):
        assert got[ep][0] == pytest.approx(half[h][0], rel=1e-6), (ep, got, half)
        assert got[ep][1] == half[h][1] == 600
    assert got["ep-c"][1] == 1200


def test_endpoint_correlation_pairs_overlap_only_while_held(day):
    _, con = day
    seconds = dict(((a, b), n) for a, b, n in con.execute(
        "SELECT a, b, seconds FROM endpoint_correlation WHERE pair_kind = 'endpoint'").fetchall())
    assert seconds[("ep-a", "ep-c")] == 600 and seconds[("ep-b", "ep-c")] == 600, seconds


def test_power_cap_whatif_endpoint_and_job_rows_see_their_own_half(day):
    _, con = day
    rows = con.execute(
        "SELECT level, entity, gpu_seconds, energy_j FROM power_cap_whatif WHERE phase = 'all' AND cap_factor = 1.0 "
        "AND level IN ('endpoint', 'job')").fetchall()
    got = {(lv, e): (s, j) for lv, e, s, j in rows}
    for level, host, names in (("endpoint", "infer-0", ("ep-a", "ep-b")), ("job", "train-0", ("job-a", "job-b"))):
        half = _halves(con, host)
        for name, h in zip(names, "ab", strict=True):
            assert got[(level, name)][0] == pytest.approx(half[h][1]), (level, name, got)
            assert got[(level, name)][1] == pytest.approx(half[h][0], rel=1e-6), (level, name, got)


def test_phase_segments_rows_lie_inside_their_endpoints_half(day):
    _, con = day
    rows = con.execute(
        "SELECT endpoint, min(epoch_ns(start_ts)), max(epoch_ns(end_ts)), sum(energy_j) FILTER (source = 'requests') "
        "FROM phase_segments WHERE host = 'infer-0' AND gpu = 0 GROUP BY 1").fetchall()
    got = {ep: (lo, hi, e) for ep, lo, hi, e in rows}
    t, w = _power()
    assert got["ep-a"][1] <= NOON_NS and got["ep-b"][0] >= NOON_NS, got
    assert got["ep-a"][2] == pytest.approx(_energy(t, w, t[0], NOON_NS), rel=1e-6)
    assert got["ep-b"][2] == pytest.approx(_energy(t, w, NOON_NS, t[-1]), rel=1e-6)


def test_phase_timeline_slots_belong_to_the_endpoint_holding_the_gpu(day):
    _, con = day
    rows = con.execute(
        "SELECT endpoint, min(epoch_ns(ts)), max(epoch_ns(ts)), count(*) FROM phase_timeline "
        "WHERE host = 'infer-0' AND gpu = 0 GROUP BY 1").fetchall()
    got = {ep: (lo, hi, n) for ep, lo, hi, n in rows}
    assert set(got) == {"ep-a", "ep-b"}, got
    assert got["ep-a"][1] < NOON_NS <= got["ep-b"][0], got
    assert got["ep-a"][2] == got["ep-b"][2] == 6000, got


def _shifted_requests(d, b_offset_s: int):
    """tests/test_assignments' requests, ep-b's moved ``b_offset_s`` later."""
    _requests(d)
    con = duckdb.connect()
    files = sorted(str(f) for f in (d / "requests").rglob("*.parquet"))
    table = con.sql(
        "SELECT * REPLACE ("
        + ", ".join(f"CASE WHEN endpoint = 'ep-b' THEN {c} + INTERVAL {b_offset_s} SECOND ELSE {c} END AS {c}"
                    for c in ("arrival_ts", "prefill_start_ts", "first_token_ts", "end_ts"))
        + f") FROM read_parquet({files}, hive_partitioning = false)").to_arrow_table()
    for f in files:
        Path(f).unlink()
    write_dataset(table.cast(REQUESTS), d, "requests")


@pytest.mark.slow  # runs the daily job on a day of its own
def test_requests_meet_power_reads_the_gpus_the_endpoint_held(tmp_path):
    """ep-b's requests lie 3 h after the afternoon half of GPU 0's power, the only power it held:
    the ERROR names ep-b (its power is its GPU's afternoon samples); ep-a's requests meet its morning."""
    d = tmp_path / "data"
    _inventory(d)
    t, w = _power()
    write_dataset(power_table("infer-0", 0, t, w), d, "power")
    _shifted_requests(d, 3 * 3600)
    out = run_day(d, DAY.isoformat(), selection=["power_1s", "energy_curve", "phase_intervals", "request_energy"], fleet_day=False)
    failed = {c.check: c for c in out.failed_checks}
    assert "requests_meet_power" in failed, out.failed_checks
    text = failed["requests_meet_power"].description
    assert text.startswith("endpoint ep-b: ") and "ep-a" not in text, text


@pytest.mark.parametrize("source", ["inventory", "file"])
@pytest.mark.slow  # runs the daily job on a day of its own
def test_an_endpoint_another_cluster_declares_counts_on_the_gpu_it_held(tmp_path, source):
    """ep-b is declared on infer-1 (cluster c1) and holds infer-0's GPU 0 (cluster c0) from noon: c0's
    cluster-day sees its requests and gives it exactly the afternoon's energy."""
    d = tmp_path / "data"
    infer0 = {"name": "infer-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0, "uuid": UUID}],
              "endpoints": [{"name": "ep-a", "gpus": [0]}]}
    infer1 = {"name": "infer-1", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0}],
              "endpoints": [{"name": "ep-b", "gpus": []}]}
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [infer0]}, {"name": "c1", "hosts": [infer1]}]}]}
    if source == "inventory":
        inv["assignments"] = [{"uuid": UUID, "endpoint": "ep-b", "from_ts": NOON}]
    d.mkdir(parents=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    if source == "file":
        f = tmp_path / "held.csv"
        f.write_text(f"gpu_uuid,kind,name,from_ts\n{UUID},endpoint,ep-b,{NOON.isoformat()}\n")
        assert invoke("import", "assignments", str(f), "--data-dir", str(d)).exit_code == 0
    t, w = _power()
    write_dataset(power_table("infer-0", 0, t, w), d, "power")
    _requests(d)
    out = run_day(d, DAY.isoformat(), selection=["power_1s", "energy_curve", "phase_intervals"], fleet_day=False)
    assert out.success, out.error
    con = duckdb.connect()
    con.register("pi", read_day(d, "phase_intervals", DAY.isoformat()))
    got = dict(con.execute("SELECT endpoint, sum(energy_j) FROM pi GROUP BY 1").fetchall())
    assert got["ep-b"] == pytest.approx(_energy(t, w, NOON_NS, t[-1]), rel=1e-6), got
    assert got["ep-a"] == pytest.approx(_energy(t, w, t[0], NOON_NS), rel=1e-6), got


def test_report_endpoint_power_follows_the_gpu_it_held(day):
    """The report's inference section sums an endpoint's GPUs only while it held them: ep-a's trace
    ends before noon, ep-b's (no GPU in the inventory's lists) starts after it."""
    from reports.data import Reader, RunHistory
    from reports.sections import inference
    from reports.sections.base import Ctx

    d, _ = day
    reader = Reader.open(d)
    try:
        ctx = Ctx(reader=reader, data_dir=d, date=DAY.isoformat(), history=RunHistory(available=False))
        traces = {ep: inference.endpoint_power(ctx, ep) for ep in ("ep-a", "ep-b")}
    finally:
        reader.close()
    for ep, before in {"ep-a": True, "ep-b": False}.items():
        assert traces[ep] is not None, ep
        points, _, _, _ = traces[ep]
        t_ms = [p["t"] for p in points]
        assert t_ms and all((t * 10**6 < NOON_NS) == before for t in t_ms), (ep, min(t_ms), max(t_ms))
