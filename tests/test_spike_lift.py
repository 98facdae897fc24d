"""endpoint_correlation's spike co-occurrence and lift on endpoints with known arrivals.

Sample size (fixed): 6 h at 10 Hz per GPU; each prefill lifts a GPU from its decode level to
800 W for 0.4 s, arrivals Poisson at 0.05 /s. Four one-GPU endpoints in one cluster:
busy-a and busy-b draw independent arrivals over a decode level of 560 W (80 % of the 700 W TDP:
a busy endpoint, above a fixed 75 %-of-TDP spike line all the time); same-a and same-b get the
same arrivals over a decode level that drifts from 250 to 400 W through the hours."""

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
SECONDS, RATE_PER_S, PREFILL_W, PREFILL_SLOTS = 6 * 3600, 0.05, 800.0, 4


def _arrivals(rng: np.random.Generator) -> np.ndarray:
    """Poisson arrival slots (100 ms) over the sample."""
    gaps = rng.exponential(1 / RATE_PER_S, size=int(SECONDS * RATE_PER_S * 1.5))
    t = np.cumsum(gaps)
    return (t[t < SECONDS - 1] * 10).astype(np.int64)


def _trace(rng: np.random.Generator, decode_w: np.ndarray, arrivals: np.ndarray) -> np.ndarray:
    p = decode_w + rng.normal(0, 15, size=decode_w.size)
    for k in range(PREFILL_SLOTS):
        p[arrivals + k] = PREFILL_W + rng.normal(0, 15, size=arrivals.size)
    return p


@pytest.fixture(scope="module")
@builds_a_day
def pairs(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("lift") / "data"
    data_dir.mkdir()
    gpus = [{"index": i, "tdp_w": 700} for i in range(2)]
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": [
        {"name": "busy", "role": "inference", "gpus": gpus,
         "endpoints": [{"name": "busy-a", "gpus": [0]}, {"name": "busy-b", "gpus": [1]}]},
        {"name": "same", "role": "inference", "gpus": gpus,
         "endpoints": [{"name": "same-a", "gpus": [0]}, {"name": "same-b", "gpus": [1]}]},
    ]}]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    rng = np.random.default_rng(32)
    n = SECONDS * 10
    t = day_start_ns() + np.arange(n, dtype=np.int64) * 100_000_000
    busy = np.full(n, 560.0)
    drifting = np.linspace(250.0, 400.0, n)
    shared = _arrivals(rng)
    traces = {("busy", 0): _trace(rng, busy, _arrivals(rng)), ("busy", 1): _trace(rng, busy, _arrivals(rng)),
              ("same", 0): _trace(rng, drifting, shared), ("same", 1): _trace(rng, drifting, shared)}
    for (host, gpu), p in traces.items():
        write_dataset(power_table(host, gpu, t, p), data_dir, "power", prefix=f"{host}{gpu}")
    outcome = run_day(data_dir, DATE, selection=["power_1s", "endpoint_correlation"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("endpoint_correlation", read_day(data_dir, "endpoint_correlation", DATE))
    return {(a, b): dict(zip(("r", "co", "chance", "lift", "spikes"), rest, strict=True)) for a, b, *rest in con.execute(
        "select a, b, pearson_1s, spike_cooccurrence, spike_chance, spike_lift, a_spikes from endpoint_correlation "
        "where pair_kind = 'endpoint'").fetchall()}


def test_independent_busy_endpoints_lift_near_one(pairs):
    """Busy independent endpoints: the co-occurrence is what chance gives (lift 1 within 4 σ of
    the binomial share of a's spikes met by chance), not ~100 % as a fixed 75 %-of-TDP line said."""
    for key in (("busy-a", "busy-b"), ("busy-b", "busy-a")):
        p = pairs[key]
        assert 0.8 * SECONDS * RATE_PER_S < p["spikes"] < 1.2 * SECONDS * RATE_PER_S  # spikes are the prefills
        sd_lift = math.sqrt(p["chance"] * (1 - p["chance"]) / p["spikes"]) / p["chance"]
        assert abs(p["lift"] - 1) <= 4 * sd_lift, (key, p, sd_lift)
        assert p["co"] < 0.5 and abs(p["r"]) < 0.1


def test_same_arrivals_lift_far_above_one(pairs):
    for key in (("same-a", "same-b"), ("same-b", "same-a")):
        p = pairs[key]
        assert p["co"] >= 0.97, (key, p)
        assert p["lift"] >= 5, (key, p)
        assert p["lift"] == pytest.approx(p["co"] / p["chance"], rel=1e-4)
