"""power_summary and training_vs_inference on the constructed square-wave fleet (known answers)."""

import duckdb
import pytest

from pipeline.warehouse import read_day
from tests.builders import DAY

DATE = DAY.isoformat()
ASSETS = ["power_1s", "fleet_power_1s", "power_100ms", "fleet_power_100ms", "swing_stats", "power_summary", "training_vs_inference"]


@pytest.fixture(scope="module")
def built(report_day):
    """The shared square-wave day (``report_day``): train-0, 2 GPUs 100↔700 W (period 4 s);
    infer-0, 2 GPUs at 200 W; 600 s at 10 Hz."""
    outcome = report_day.outcome
    assert set(ASSETS) <= report_day.tables(), outcome.materialized
    con = duckdb.connect()
    for t in ("power_summary", "training_vs_inference"):
        con.register(t, read_day(report_day.data_dir, t, DATE))
    return con, outcome


def _summary(con, level, entity):
    return con.execute(
        "select mean_w, p99_w, p999_w, max_w, mean_pct, max_pct, peak_to_avg, energy_kwh, above_tdp_share, idle_share, provisioned_w "
        "from power_summary where level=? and entity=?",
        [level, entity],
    ).fetchone()


def test_gpu_and_host_summaries(built):
    con, _ = built
    mean, p99, p999, mx, mean_pct, max_pct, pta, kwh, above, idle, prov = _summary(con, "gpu", "train-0/0")
    assert (mean, p99, p999, mx) == (400.0, 700.0, 700.0, 700.0)
    assert (mean_pct, max_pct, pta, prov) == (pytest.approx(400 / 7), 100.0, 1.75, 700.0)
    assert idle == 0.5 and above == 0.0  # 100 W < 20% of 700 W half the time
    # 599.9 s of samples, trapezoid: the 150 edges each lose half a step of the 600 W jump... within 0.5%.
    assert kwh == pytest.approx(400 * 600 / 3.6e6, rel=5e-3)
    host = _summary(con, "host", "train-0")
    assert host[:4] == (800.0, 1400.0, 1400.0, 1400.0) and host[10] == 1500.0
    cluster = _summary(con, "cluster", "c0")
    assert cluster[:4] == (1200.0, 1800.0, 1800.0, 1800.0) and cluster[4] == pytest.approx(30.0)
    assert _summary(con, "host", "infer-0")[6] == 1.0  # flat: peak = average


def test_training_vs_inference(built):
    con, outcome = built
    rows = {r[0]: r[1:] for r in con.execute(
        "select role, peak_pct, mean_pct, max_2s_swing_pct, host_max_2s_swing_pct, reference_max_2s_swing_pct from training_vs_inference"
    ).fetchall()}
    assert rows["training"] == (pytest.approx(1400 / 15), pytest.approx(800 / 15), pytest.approx(80.0), pytest.approx(80.0), 37.5)
    assert rows["inference"][2] == 0.0 and rows["inference"][4] == 9.0
    failed = {(c.asset, c.check) for c in outcome.failed_checks}
    assert not {f for f in failed if f[0] in ("power_summary", "training_vs_inference")}, failed
