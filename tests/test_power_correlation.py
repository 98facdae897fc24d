"""endpoint_correlation and coincidence on constructed series: identical, shifted and independent."""

import math

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day

DATE = DAY.isoformat()
ASSETS = ["power_1s", "fleet_power_1s", "endpoint_correlation", "coincidence"]
N, Q, LOW, HIGH, SECONDS = 8, 0.2, 100.0, 700.0, 3600  # spiky host: 8 independent 1 s spike trains, 1 h


def _host(name, gpus, endpoints):
    return {"name": name, "role": "inference", "gpus": [{"index": i, "tdp_w": 700} for i in range(gpus)],
            "endpoints": [{"name": e, "gpus": g} for e, g in endpoints]}


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    """infer-0: ep-a (GPUs 0, 1) and ep-b (2, 3) all draw the same 1 s spike train (10 min);
    infer-1: ep-c = that train 3 s later; spiky: ep-s, 8 GPUs, each at 700 W in a random 20% of
    the seconds of an hour (independently), else 100 W."""
    data_dir = tmp_path_factory.mktemp("corr") / "data"
    data_dir.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": [
        _host("infer-0", 4, [("ep-a", [0, 1]), ("ep-b", [2, 3])]),
        _host("infer-1", 2, [("ep-c", [0, 1])]),
        _host("spiky", N, [("ep-s", list(range(N)))]),
    ]}]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    rng = np.random.default_rng(7)
    spikes_1s = rng.random(620) < 0.1
    t = day_start_ns() + np.arange(6000, dtype=np.int64) * 100_000_000
    base = np.where(np.repeat(spikes_1s[3:603], 10), 700.0, 200.0)
    shifted = np.where(np.repeat(spikes_1s[0:600], 10), 700.0, 200.0)  # shifted(t + 3 s) = base(t)
    for gpu in range(4):
        write_dataset(power_table("infer-0", gpu, t, base), data_dir, "power", prefix=f"a{gpu}")
    for gpu in range(2):
        write_dataset(power_table("infer-1", gpu, t, shifted), data_dir, "power", prefix=f"c{gpu}")
    ts = day_start_ns() + np.arange(SECONDS * 10, dtype=np.int64) * 100_000_000
    spiking = rng.random((N, SECONDS)) < Q
    for gpu in range(N):
        p = np.repeat(np.where(spiking[gpu], HIGH, LOW), 10)
        write_dataset(power_table("spiky", gpu, ts, p), data_dir, "power", prefix=f"s{gpu}")
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    for name in ("endpoint_correlation", "coincidence"):
        con.register(name, read_day(data_dir, name, DATE))
    return con, outcome, int(spiking.sum(axis=0).max())


def _pair(con, a, b):
    return con.execute("select pearson_1s, spike_cooccurrence, best_lag_s from endpoint_correlation where a=? and b=?", [a, b]).fetchone()


def test_identical_endpoints_correlate_fully(built):
    con, *_ = built
    r, co, lag = _pair(con, "ep-a", "ep-b")
    assert r == pytest.approx(1.0, abs=1e-6) and co == 1.0 and lag == 0
    r, co, lag = _pair(con, "infer-0/0", "infer-0/1")  # GPUs inside ep-a
    assert r == pytest.approx(1.0, abs=1e-6) and co == 1.0 and lag is None


def test_shifted_endpoint_found_at_its_lag(built):
    con, *_ = built
    r, _, lag = _pair(con, "ep-a", "ep-c")
    assert lag == 3 and abs(r) < 0.3
    assert _pair(con, "ep-c", "ep-a")[2] == -3


def test_coincidence_identical_members(built):
    con, *_ = built
    assert con.execute("select coincidence_factor, smoothing_ratio, members from coincidence where entity='infer-0'").fetchone() == (
        pytest.approx(1.0), pytest.approx(1.0), 4)


def _max_spikes_cdf(n: int, q: float, seconds: int) -> np.ndarray:
    """P(max over `seconds` independent seconds of Binomial(n, q) ≤ k), k = 0..n."""
    return np.cumsum([math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]) ** seconds


def _cf(k: float) -> float:
    """Coincidence factor when at most k of the N GPUs spike together: (N·low + k·(high − low)) / (N·high)."""
    return (N * LOW + (HIGH - LOW) * k) / (N * HIGH)


def test_independent_spike_trains_near_analytic_coincidence(built):
    con, _, k_realized = built
    cf, smooth, members = con.execute("select coincidence_factor, smoothing_ratio, members from coincidence where entity='spiky'").fetchone()
    cdf = _max_spikes_cdf(N, Q, SECONDS)
    k_expected = float(sum(1 - cdf[k - 1] for k in range(1, N + 1)))  # ≈ 6.3 of 8 GPUs at once
    assert members == N
    assert cf == pytest.approx(_cf(k_realized))  # exact for the drawn trains
    assert cf == pytest.approx(_cf(k_expected), abs=(HIGH - LOW) / (N * HIGH))  # within one GPU of the analytic mean
    assert cdf[k_realized - 1] < 0.995 and cdf[k_realized] > 0.005  # a plausible draw of the max
    assert cf < 0.95
    # Every GPU has the same peak (700) and mean, so the smoothing ratio equals the factor.
    assert smooth == pytest.approx(cf, rel=0.02)


def test_checks_pass(built):
    _, outcome, _ = built
    failed = {(c.asset, c.check) for c in outcome.failed_checks}
    assert not {f for f in failed if f[0] in ("endpoint_correlation", "coincidence")}, failed


GAPS = {0: [*range(100, 131), *range(400, 406)], 1: [250, 251, 252, 600]}
"""Seconds each GPU of ep-g has no sample in (its endpoint's series misses them all)."""


@pytest.fixture(scope="module")
@builds_a_day
def gappy(tmp_path_factory):
    """ep-g: GPUs 0 and 1 of gappy-0, 15 min of whole watts held for each second (10 Hz), each GPU
    with seconds without a sample (GAPS). Returns (power_1s of the day, _level as the table's SQL
    file builds it)."""
    from pipeline.tables import statements
    from pipeline.warehouse import compute_connection

    data_dir = tmp_path_factory.mktemp("corr-gaps") / "data"
    data_dir.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": [_host("gappy-0", 2, [("ep-g", [0, 1])])]}]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    rng = np.random.default_rng(5)
    for gpu, missing in GAPS.items():
        seconds = np.setdiff1d(np.arange(900), missing)
        watts = rng.integers(150, 700, seconds.size).astype(float)
        t = day_start_ns() + (seconds[:, None] * 1_000_000_000 + np.arange(10) * 100_000_000).ravel()
        write_dataset(power_table("gappy-0", gpu, t, np.repeat(watts, 10)), data_dir, "power", prefix=f"g{gpu}")
    outcome = run_day(data_dir, DATE, selection=["power_1s"])
    assert outcome.success, outcome.error
    with compute_connection(data_dir, DATE) as con:
        prepare, _ = statements("endpoint_correlation/endpoint_correlation")
        con.execute(prepare[0])  # the _level table: every series' excursion from its ±60 s level
        level = con.execute("SELECT kind, e, t, v, excursion_w FROM _level").fetchall()
    return read_day(data_dir, "power_1s", DATE), level


def test_local_level_over_missing_seconds_is_the_mean_of_the_seconds_within_60_s(gappy):
    """The ±60 s local level of a series with missing seconds (a GPU without samples; an endpoint
    second where one of its GPUs has none) is the mean of the values at the seconds it has within
    60 s either side (a RANGE frame over seconds), by a naive loop over power_1s: not a missing
    second counted as 0 W, nor 60 rows either side reaching past a gap."""
    power, level = gappy
    start_s = day_start_ns() // 1_000_000_000
    gpu = {g: {} for g in GAPS}
    for r in power.select(["gpu", "ts", "mean_w"]).to_pylist():
        gpu[r["gpu"]][int(r["ts"].timestamp()) - start_s] = r["mean_w"]
    for g, missing in GAPS.items():
        assert set(gpu[g]) == set(range(900)) - set(missing)  # power_1s has no row for a second without samples
    series = {("gpu", f"gappy-0/{g}"): v for g, v in gpu.items()}
    series[("endpoint", "ep-g")] = {t: gpu[0][t] + gpu[1][t] for t in gpu[0].keys() & gpu[1].keys()}

    def naive(v: dict[int, float], t: int) -> float:
        near = [v[u] for u in range(t - 60, t + 61) if u in v]
        return v[t] - sum(near) / len(near)

    got = {(kind, e, t - start_s): (v, x) for kind, e, t, v, x in level}
    want = {(kind, e, t): (v[t], naive(v, t)) for (kind, e), v in series.items() for t in v}
    assert got.keys() == want.keys()
    for key, (v, x) in want.items():
        assert got[key][0] == v and got[key][1] == pytest.approx(x, abs=1e-9), key
