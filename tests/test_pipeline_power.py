"""The foundation pipeline on constructed signals: exact numbers, checks, idempotency."""

import duckdb
import pytest

from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY
from tests.days import copy_of

DATE = DAY.isoformat()


def _table(data_dir, name):
    return read_day(data_dir, name, DATE)


@pytest.fixture
def built(report_day):
    """The session's ten minutes of the square-wave fleet (tests/days.py), read only."""
    return report_day.data_dir, report_day.outcome


def test_power_1s_known_answers(built):
    data_dir, outcome = built
    con = duckdb.connect()
    con.register("p", _table(data_dir, "power_1s"))
    # 600 s × 4 GPUs; the square wave is high for 2 s then low for 2 s, 10 samples per second.
    assert con.execute("select count(*) from p").fetchone()[0] == 600 * 4
    assert con.execute("select min(samples), max(samples) from p").fetchone() == (10, 10)
    rows = con.execute(
        "select mean_w, min_w, max_w from p where host = 'train-0' and gpu = 0 order by ts limit 4"
    ).fetchall()
    assert rows == [(700.0, 700.0, 700.0), (700.0, 700.0, 700.0), (100.0, 100.0, 100.0), (100.0, 100.0, 100.0)]
    # Trapezoid energy of a constant 200 W over 599.9 s of samples.
    e = con.execute("select sum(energy_j) from p where host = 'infer-0' and gpu = 1").fetchone()[0]
    assert e == pytest.approx(200 * 599.9, rel=1e-9)
    # Square wave: 150 edges of 600 W each (except the last half period) integrate exactly.
    e_train = con.execute("select sum(energy_j) from p where host = 'train-0' and gpu = 0").fetchone()[0]
    expected = sum((a + b) / 2 * 0.1 for a, b in zip(_wave(), _wave()[1:], strict=False))
    assert e_train == pytest.approx(expected, rel=1e-9)


def _wave():
    return [700.0 if (i * 0.1) % 4.0 < 2.0 else 100.0 for i in range(6000)]


def test_fleet_power_sums_and_provisioned(built):
    data_dir, _ = built
    con = duckdb.connect()
    con.register("f", _table(data_dir, "fleet_power_1s"))
    levels = dict(con.execute("select level || ':' || entity, count(*) from f group by all").fetchall())
    assert levels == {"host:train-0": 600, "host:infer-0": 600, "cluster:c0": 600, "role:training": 600, "role:inference": 600, "fleet:test": 600,
                      # the cluster-day's share of each role, which the fleet-day rolls up (docs/scale-out.md)
                      "cluster_role:c0/training": 600, "cluster_role:c0/inference": 600}
    hi = con.execute("select power_w, provisioned_w, power_pct from f where level = 'cluster' order by ts limit 1").fetchone()
    assert hi == (pytest.approx(1400 + 400), 4000.0, pytest.approx(45.0))
    # The inference host has no provisioned_w: it defaults to the sum of its TDPs.
    assert con.execute("select distinct provisioned_w from f where entity = 'infer-0'").fetchall() == [(1400.0,)]


@pytest.mark.slow  # a second run of the day's power_1s and fleet_power_1s
def test_rematerializing_gives_identical_tables(report_day, tmp_path):
    data_dir = copy_of(report_day, tmp_path / "data")  # the second run writes
    before = {n: _table(data_dir, n) for n in ("power_1s", "fleet_power_1s")}
    # Only the two tables compared: the rerun computes them alone, the first run with every other table.
    again = run_day(data_dir, DATE, selection=list(before))
    assert again.success and {key.rsplit("/", 1)[-1] for key in again.materialized} >= set(before), again.materialized
    for name, table in before.items():
        assert _table(data_dir, name).equals(table), name


def test_checks_pass_on_clean_partial_day(built):
    _, outcome = built
    failed = {(c.asset, c.check): c.severity for c in outcome.failed_checks}
    # Ten minutes of a day: coverage warns. The day's requests (one every 5 s on ep-a) fall on
    # infer-0's flat 200 W, which no prefill lifts: the phase tables warn that the request clock
    # looks offset from the power. Nothing else fails.
    assert failed == {("power_1s", "gpu_coverage"): "WARN", ("phase_timeline", "clock_skew"): "WARN"}
    assert outcome.ok


# Bad files (duplicates, drifted schemas, corrupt footers) are tested in tests/faults/test_pipeline_files.py.
