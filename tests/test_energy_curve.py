"""energy_curve and the energy_between macro on constructed traces whose integrals are known exactly."""

import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection
from tests.builders import DAY, day_start_ns, power_table, two_host_inventory
from tests.days import builds_a_day

DATE = DAY.isoformat()
T0 = day_start_ns()
S = 1_000_000_000


@pytest.fixture(scope="module")
@builds_a_day
def curve(tmp_path_factory):
    """train-0/0: 500 W constant, 20 ms samples for 60 s. train-0/1: a ramp 100 → 700 W over 60 s
    (10 Hz), then a 5 s gap (not integrated), then 200 W for 10 s."""
    d = tmp_path_factory.mktemp("curve") / "data"
    two_host_inventory(d)
    t = T0 + np.arange(3001, dtype=np.int64) * 20_000_000
    write_dataset(power_table("train-0", 0, t, np.full(len(t), 500.0), source="nvml-buffer"), d, "power", prefix="c0")
    t1 = T0 + np.arange(601, dtype=np.int64) * 100_000_000
    p1 = 100.0 + 10.0 * (t1 - T0) / S
    t2 = T0 + 65 * S + np.arange(101, dtype=np.int64) * 100_000_000
    write_dataset(power_table("train-0", 1, np.concatenate([t1, t2]), np.concatenate([p1, np.full(101, 200.0)])), d, "power", prefix="c1")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve"])
    assert outcome.success, outcome.error
    assert not [c for c in outcome.failed_checks if c.asset == "energy_curve"], outcome.failed_checks
    return d


def _between(d, gpu, a_s, b_s):
    with compute_connection(d, DATE) as con:
        return con.execute(
            "SELECT energy_between('train-0', ?, make_timestamptz(?::BIGINT), make_timestamptz(?::BIGINT))",
            [gpu, (T0 + round(a_s * 1e9)) // 1000, (T0 + round(b_s * 1e9)) // 1000],
        ).fetchone()[0]


@pytest.mark.parametrize("a,b", [(0.0, 60.0), (1.234567, 1.264567), (10.011, 10.019), (59.99, 60.0), (-5.0, 0.5), (30.0, 120.0)])
def test_constant_power(curve, a, b):
    lo, hi = max(a, 0.0), min(b, 60.0)
    assert _between(curve, 0, a, b) == pytest.approx(500.0 * (hi - lo), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("a,b", [(0.0, 60.0), (12.345678, 12.375678), (0.05, 0.07), (33.3, 47.123456)])
def test_ramp_exact(curve, a, b):
    # ∫ (100 + 10 t) dt: the ramp is linear, so the trapezoid with interpolation inside a sample interval is exact
    expected = 100.0 * (b - a) + 5.0 * (b * b - a * a)
    assert _between(curve, 1, a, b) == pytest.approx(expected, rel=1e-9)


def test_gap_not_integrated(curve):
    # 60 s → 65 s is a gap (> 2 s): nothing; then 200 W for 10 s
    assert _between(curve, 1, 60.0, 65.0) == pytest.approx(0.0, abs=1e-9)
    assert _between(curve, 1, 59.0, 70.0) == pytest.approx((100 + 10 * 59.5) * 1.0 + 200.0 * 5.0, rel=1e-9)


def test_curve_total_matches_power_1s(curve):
    with compute_connection(curve, DATE) as con:
        rows = con.execute(
            """SELECT c.gpu, c.j, s.j FROM (SELECT gpu, max(end_energy_j) AS j FROM energy_curve GROUP BY gpu) c
               JOIN (SELECT gpu, sum(energy_j) AS j FROM power_1s GROUP BY gpu) s USING (gpu) ORDER BY 1"""
        ).fetchall()
    assert [r[0] for r in rows] == [0, 1]
    for _, c, s in rows:
        assert c == pytest.approx(s, rel=1e-9)
    assert rows[0][1] == pytest.approx(500.0 * 60, rel=1e-9)
    assert rows[1][1] == pytest.approx(100 * 60 + 5 * 3600 + 200 * 10, rel=1e-9)
