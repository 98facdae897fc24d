"""swing_projection: the projection's kernel against simulator arrays of many endpoints (built as
bench/paper_swings.py builds them, without the pipeline), and the table on a built day."""

import datetime as dt

import numpy as np
import pytest
import yaml

from bench.paper_swings import WINDOW_SLOTS, host_slots, max_swing_w
from collectors.simulate import simulate
from collectors.simulate.fleets import HOST_PROVISIONED_W, paper_fleet
from pipeline import swing_projection as sp
from tests.days import builds_a_day

ENDPOINTS, SAMPLE, HOURS = 64, 8, 0.25


@pytest.fixture(scope="module")
def paper_hosts(tmp_path_factory):
    """The paper fleet's inference cluster at 64 endpoints (one 8-GPU host each, UTC−5…−8), 15 min
    from 00:00 UTC (their afternoon peak), as 100 ms sums per host."""
    work = tmp_path_factory.mktemp("paper")
    fleet = work / "paper.yaml"
    fleet.write_text(yaml.safe_dump(paper_fleet(ENDPOINTS, 0)))
    day = dt.date(2026, 12, 1)
    simulate(work / "data", start=day, seed=0, fleet=fleet, hours=HOURS)
    epoch = int(dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC).timestamp()) * 10**9
    n_slots = int(HOURS * 36_000)
    per_host: dict[str, np.ndarray] = {}
    for f in sorted((work / "data" / "power").rglob("*.parquet")):
        host = f.parent.name.removeprefix("host=")
        per_host[host] = per_host.get(host, 0) + host_slots(f, epoch, n_slots)
    hosts = sorted(per_host)
    assert len(hosts) == ENDPOINTS
    return np.array([per_host[h][WINDOW_SLOTS:-WINDOW_SLOTS] for h in hosts])


@pytest.mark.slow
def test_projection_from_8_endpoints_predicts_the_64_sum(paper_hosts):
    """The 64-endpoint sum's largest 2 s swing (% of provisioned) lies in the band projected from
    8 of them: independent endpoints with the same daily load, as the projection assumes."""
    truth = 100 * max_swing_w(paper_hosts.sum(axis=0)) / (HOST_PROVISIONED_W * ENDPOINTS)
    sample = paper_hosts[:SAMPLE]
    rows = sp.project(sample, np.full(SAMPLE, HOST_PROVISIONED_W), np.full(SAMPLE, 8), [1, SAMPLE, ENDPOINTS],
                      shift=True, seed=sp.seed_for("2026-12-01", "infer-paper"))
    by_k = {r["members"]: r for r in rows}
    at64 = by_k[ENDPOINTS]
    assert at64["method"] == "shifted" and at64["gpus"] == 8 * ENDPOINTS
    assert at64["max_2s_swing_pct_low"] <= truth <= at64["max_2s_swing_pct_high"], (truth, at64)
    assert at64["max_2s_swing_pct"] < by_k[1]["max_2s_swing_pct"] / 2  # the sum smooths
    # the observed 8 are the observed sum, whatever the draw
    own = 100 * max_swing_w(sample.sum(axis=0)) / (HOST_PROVISIONED_W * SAMPLE)
    assert by_k[SAMPLE]["max_2s_swing_pct_low"] == pytest.approx(own, rel=1e-4)
    assert by_k[SAMPLE]["max_2s_swing_pct_high"] == pytest.approx(own, rel=1e-4)


def test_window_swings_match_the_bench_definition():
    rng = np.random.default_rng(1)
    x = rng.normal(1000, 50, 5000)
    assert sp.window_swings(x).max() == pytest.approx(max_swing_w(x))
    for slots in (2, 3, 7, 20, 33):
        win = np.lib.stride_tricks.sliding_window_view(x, slots)
        assert np.allclose(sp.window_swings(x, slots), win.max(axis=1) - win.min(axis=1))


def test_lock_step_copies_keep_the_swing_and_draws_repeat():
    """Training: k copies of in-step hosts swing k times as much: the share of provisioned stays."""
    t = np.arange(6000)
    hosts = np.array([np.where((t // 10) % 2 == 0, 5000.0, 2000.0) + h for h in range(2)])
    rows = sp.project(hosts, np.full(2, 6500.0), np.full(2, 8), [1, 2, 128], shift=False, seed=7)
    pct = {r["members"]: r["max_2s_swing_pct"] for r in rows}
    assert pct[128] == pytest.approx(pct[1], rel=1e-4) == pytest.approx(100 * 3000 / 6500, rel=1e-4)
    assert rows == sp.project(hosts, np.full(2, 6500.0), np.full(2, 8), [1, 2, 128], shift=False, seed=7)


def test_gpus_is_a_whole_count_some_draw_had():
    """Members of different sizes (1 and 8 GPUs): each draw of k of them has its own GPU count;
    the row says one a draw had (never a mean no draw had, such as 4 for k = 1) and the range."""
    rng = np.random.default_rng(3)
    series = rng.normal(3000, 300, (2, 4000))
    sizes = np.array([1, 8])
    rows = {r["members"]: r for r in sp.project(series, sizes * 800.0, sizes, [1, 2, 12], shift=True, seed=11)}
    for k, counts in {1: {1, 8}, 2: {9}}.items():
        r = rows[k]
        assert type(r["gpus"]) is int and r["gpus"] in counts, (k, r["gpus"])
        assert r["gpus_low"] <= r["gpus"] <= r["gpus_high"] and {r["gpus_low"], r["gpus_high"]} <= counts
    assert (rows[1]["gpus_low"], rows[1]["gpus_high"]) == (1, 8)  # the draws picked members of both sizes
    assert rows[2]["gpus"] == rows[2]["gpus_low"] == rows[2]["gpus_high"] == 9
    assert 9 + 10 <= rows[12]["gpus_low"] <= rows[12]["gpus"] <= rows[12]["gpus_high"] <= 9 + 10 * 8
    assert rows[12]["gpus"] in {9 + n + 8 * (10 - n) for n in range(11)}


def test_k_grid_reaches_the_published_size():
    ks, k_pub = sp.k_grid(4, 4.0, 2048)
    assert k_pub == 512 and ks[0] == 1 and ks[-1] == 512 and 4 in ks
    ks, k_pub = sp.k_grid(3, 1.0, 4096, max_k=100)
    assert k_pub == 100 and max(ks) == 100 and 3 in ks


@pytest.fixture(scope="module")
@builds_a_day
def tiny_day(tmp_path_factory):
    """The tiny fleet (one 2-GPU training job, two 2-GPU endpoints) for 20 min at their peak."""
    from pipeline.runner import run_day

    data_dir = tmp_path_factory.mktemp("tiny") / "data"
    simulate(data_dir, start=DAY, seed=0, fleet="tiny", hours=1 / 3)
    outcome = run_day(data_dir, DAY.isoformat(), selection=["power_1s", "power_100ms", "swing_projection"])
    assert outcome.success, outcome.error
    return data_dir


DAY = dt.date(2026, 11, 30)


def _rows(data_dir):
    from pipeline.warehouse import read_day

    return read_day(data_dir, "swing_projection", DAY.isoformat()).sort_by([("kind", "ascending"), ("members", "ascending")]).to_pylist()


@pytest.mark.slow  # runs the daily job on a day of its own
def test_table_on_a_built_day_and_rebuilt_identically(tiny_day):
    from pipeline.runner import run_day

    rows = _rows(tiny_day)
    inference = [r for r in rows if r["kind"] == "inference"]
    training = [r for r in rows if r["kind"] == "training"]
    assert {r["entity"] for r in inference} == {"c0"} and {r["entity"] for r in training} == {"tiny-train"}
    assert [r["method"] for r in inference[:2]] == ["observed", "observed"] and inference[2]["method"] == "shifted"
    assert {r["method"] for r in training[1:]} == {"lock-step"}
    pub = [r for r in rows if r["published_scale"]]
    assert {(r["kind"], r["gpus"], r["published_2s_swing_pct"]) for r in pub} == {("inference", 2048, 9.0), ("training", 1024, 37.5)}
    assert all(r["gpus_low"] == r["gpus"] == r["gpus_high"] for r in rows)  # members alike: every draw has the same GPUs
    for r in rows:
        assert r["max_2s_swing_pct_low"] <= r["max_2s_swing_pct"] <= r["max_2s_swing_pct_high"]
        assert r["p99_2s_swing_pct"] <= r["max_2s_swing_pct_high"]
    # the endpoints' sum smooths with k; the in-step job does not
    assert inference[-1]["max_2s_swing_pct"] < inference[0]["max_2s_swing_pct"] / 2
    assert training[-1]["max_2s_swing_pct"] == pytest.approx(training[0]["max_2s_swing_pct"], rel=0.35)
    outcome = run_day(tiny_day, DAY.isoformat(), selection=["swing_projection"])
    assert outcome.success, outcome.error
    assert _rows(tiny_day) == rows
