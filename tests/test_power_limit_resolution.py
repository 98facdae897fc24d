"""power_cap_whatif's enforced limit is the one the GPU reports in force (as energy_per_token
resolves it), not the inventory's or the TDP: a GPU of 400 W TDP whose samples report nothing for a
minute, then a 300 W limit, then 250 W. Known 1 s levels, so every figure has an exact answer."""

import math

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day

DATE = DAY.isoformat()
S = 1_000_000_000
T0 = day_start_ns()
SECONDS = 180
PROVISIONED_W = 2000


def _limit_of_second(s: int) -> float:
    """In force at second s: no report in the first minute (the first report, 300 W, holds), then 300, then 250."""
    return 300.0 if s < 120 else 250.0


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("limits") / "data"
    d.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "provisioned_w": PROVISIONED_W, "hosts": [
        {"name": "inf-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 400, "model": "A100-SXM4-80GB"}],
         "endpoints": [{"name": "ep-a", "gpus": [0]}]}]}]}]}
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    levels = np.random.default_rng(3).integers(60, 380, SECONDS).astype(np.float64)
    t = T0 + np.arange(SECONDS * 10, dtype=np.int64) * (S // 10)
    table = power_table("inf-0", 0, t, np.repeat(levels, 10))
    sec = (t - T0) // S
    reported = pa.array(np.where(sec < 60, np.nan, np.where(sec < 120, 300.0, 250.0)).astype(np.float32), from_pandas=True)
    table = table.set_column(table.schema.get_field_index("power_limit_w"), "power_limit_w", reported)
    write_dataset(table, d, "power", prefix="g0")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "phase_intervals", "power_cap_whatif"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", read_day(d, "power_cap_whatif", DATE))
    con.register("p1", read_day(d, "power_1s", DATE))
    return con, levels


@pytest.mark.parametrize("factor", [1.0, 0.8, 0.6])
def test_caps_follow_the_reported_limit_in_force(day, factor):
    con, levels = day
    limits = np.array([_limit_of_second(s) for s in range(SECONDS)])
    caps = factor * limits
    cap_w, enforced, above_j, time_share, est, observed = con.execute(
        "SELECT cap_w, enforced_limit_w, energy_above_cap_j, time_above_share, est_energy_j, energy_j FROM t "
        "WHERE level = 'endpoint' AND entity = 'ep-a' AND phase = 'all' AND cap_factor = ?", [factor]).fetchone()
    assert enforced == pytest.approx(np.median(limits))
    assert con.execute("SELECT DISTINCT limit_source FROM t").fetchall() == [("reported",)]
    assert cap_w == pytest.approx(np.median(caps))
    assert above_j == pytest.approx(np.maximum(levels - caps, 0).sum(), rel=1e-6)
    assert time_share == pytest.approx((levels > caps).mean(), rel=1e-9)
    if factor == 1.0:  # at the enforced limit: the observed day
        assert est == pytest.approx(observed, rel=1e-12)
    else:  # below it every second above the cap is stretched (the A100 anchor α = 0.18)
        alpha = 0.18
        e = np.array([x for (x,) in con.execute("SELECT energy_j FROM p1 ORDER BY ts").fetchall()])
        assert len(e) == SECONDS
        assert est == pytest.approx(np.where(levels > caps, caps * (levels / caps) ** alpha, e).sum(), rel=1e-6)


def test_hosts_that_fit_count_the_reported_limit(day):
    con, levels = day
    for factor in (1.0, 0.7):
        limits = np.array([_limit_of_second(s) for s in range(SECONDS)])
        capped = levels if factor == 1.0 else np.minimum(levels, factor * limits)
        two_s = capped.reshape(-1, 2).mean(axis=1)
        max_2s, extra = con.execute("SELECT max_2s_w, extra_hosts_at_cap FROM t WHERE level = 'cluster' AND cap_factor = ?",
                                    [factor]).fetchone()
        assert max_2s == pytest.approx(two_s.max())
        host_cap = factor * np.median(limits)  # the GPU's limit of the day: the median over its seconds
        assert extra == math.floor((PROVISIONED_W - two_s.max()) / host_cap)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_alpha_fitted_from_limits_the_samples_report(tmp_path):
    """Two jobs doing the same steps on H100s of 700 W TDP, the inventory naming no limit: one GPU pair
    reports 700 W, the other 500 W (where the step draws 500 W and lasts 4 × (700/500)^0.3 s). The
    fit sees the two reported limits and recovers α = 0.3 within 10 %."""
    from pipeline.power_caps import fleet_alpha
    from pipeline.readonly import connect_readonly

    d = tmp_path / "data"
    d.mkdir()
    true_alpha = 0.3
    hosts = [{"name": f"h{limit}", "role": "training",
              "gpus": [{"index": i, "tdp_w": 700, "model": "H100 80GB HBM3"} for i in range(2)],
              "jobs": [{"name": f"job-{limit}", "gpus": [0, 1], "model": "llama-8b"}]} for limit in (700, 500)]
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": hosts}]}]}), d / "inventory.yaml")
    for limit in (700, 500):
        name = f"h{limit}"
        step_s = 4.0 * (700 / limit) ** true_alpha
        starts = np.arange(40) * (step_s + 1.0)
        t = np.arange(0, starts[-1] + step_s + 1.0, 0.02)
        in_step = ((t[:, None] >= starts) & (t[:, None] < starts + step_s)).any(axis=1)
        for gpu in range(2):
            table = power_table(name, gpu, T0 + np.round(t * S).astype(np.int64), np.where(in_step, float(limit), 150.0))
            table = table.set_column(table.schema.get_field_index("power_limit_w"), "power_limit_w",
                                     pa.array(np.full(len(t), limit, np.float32)))
            write_dataset(table, d, "power", prefix=f"{name}{gpu}")
        ts = lambda x: pa.array(T0 + np.round(x * S).astype(np.int64), pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
        write_dataset(pa.table({
            "job": [f"job-{limit}"] * 40, "host": [name] * 40, "step": pa.array(range(40), pa.int64()), "kind": ["step"] * 40,
            "start_ts": ts(starts), "end_ts": ts(starts + step_s), "tokens": pa.array([4096] * 40, pa.int64()),
        }), d, "job_events", prefix=name)
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "training_energy"])
    assert outcome.success, outcome.error
    con = connect_readonly(d)
    try:
        fitted = fleet_alpha(con, [DATE], workload="llama-8b")
    finally:
        con.close()
    assert fitted["H100 80GB HBM3"] == pytest.approx(true_alpha, rel=0.10)
