"""Aggregates from sparse sources: a real A100 whose nvidia-smi `power.draw` is instantaneous and a
real H100 whose `power.draw` is a 1 s average, both polled every ~250 ms (tests/data/nvidia-smi,
SOURCE.md there), each a one-GPU host in a fleet of its own. The H100's host, cluster, role and
fleet get `power_summary` and `swing_stats` rows on the 1 s average (marked `avg1s`), and no host
swings more than its only GPU: a value carried onto the 100 ms grid never widens a window."""

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.grid import grid_max_swing, grid_stats
from pipeline.runner import run_day
from tests.days import builds_a_day
from tests.test_power_real import HERE, _to_contract
from tests.test_power_swings import assert_kernels_match_sql

ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "swing_stats", "power_summary"]
# fleet, host, role, file, TDP, instantaneous?, hours to shift by (both on one UTC day); a role each, so
# no entity sums the two (an instant-only GPU and an average-only one have no series in common)
TRACES = [("lab-a100", "a100", "training", "a100-smoke-run-1784415083.csv", 400, True, 0),
          ("lab-h100", "h100", "inference", "h100-qwen3-8b.csv", 700, False, -2)]
LEVELS = ("host", "cluster", "role", "fleet")


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("sparse") / "data"
    data_dir.mkdir()
    fleets = [{"name": fleet, "clusters": [{"name": f"{host}-bench", "hosts": [
        {"name": host, "role": role, "gpus": [{"index": 0, "tdp_w": tdp}]}]}]}
        for fleet, host, role, _, tdp, _, _ in TRACES]
    dump_inventory(parse_inventory({"fleets": fleets}), data_dir / "inventory.yaml")
    dates = set()
    for _, host, _, name, _, instant, shift_h in TRACES:
        table, date = _to_contract(HERE / name, host, instant, shift_h)
        write_dataset(table, data_dir, "power", prefix=host)
        dates.add(date)
    (date,) = dates
    outcome = run_day(data_dir, date, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    for t in ("swing_stats", "power_summary", "fleet_power_100ms"):
        con.execute(f"create view {t} as select * from read_parquet('{data_dir}/derived/{t}/**/*.parquet', union_by_name = true) "
                    "where level <> 'cluster_role'")
    return data_dir, date, con, outcome


def _entities(host: str) -> dict[str, str]:
    fleet, _, role = next(t[:3] for t in TRACES if t[1] == host)
    return {"host": host, "cluster": f"{host}-bench", "role": role, "fleet": fleet}


def _swings(con, entity: str, level: str, series: str) -> dict[int, float]:
    return dict(con.execute("select window_s, max_swing_w from swing_stats where level = ? and entity = ? and series = ?",
                            [level, entity, series]).fetchall())


def test_a_1s_average_source_has_host_cluster_role_and_fleet_rows(built):
    _, _, con, _ = built
    gpu = con.execute("select mean_w, max_w from power_summary where entity = 'h100/0'").fetchone()
    for level, entity in _entities("h100").items():
        row = con.execute("select series, mean_w, max_w, energy_kwh from power_summary where level = ? and entity = ?",
                          [level, entity]).fetchone()
        assert row is not None, (level, entity)
        series, mean, mx, kwh = row
        assert series == "avg1s" and kwh > 0, (level, row)
        # one GPU: the same 1 s averages (the sum also counts values carried into empty slots)
        assert mean == pytest.approx(gpu[0], rel=0.01) and mx == pytest.approx(gpu[1], rel=1e-6), (level, row)
        assert set(_swings(con, entity, level, "avg1s")) == {1, 2, 10, 60}, level
        assert _swings(con, entity, level, "instant") == {}, "no instantaneous value: no instant rows"
    assert con.execute("select series from power_summary where entity = 'h100/0'").fetchone() == ("avg1s",)
    assert con.execute("select distinct series from power_summary where entity in ('a100/0', 'a100')").fetchall() == [("instant",)]


def test_fleet_power_100ms_says_which_series_is_complete_and_how_far_values_were_carried(built):
    _, _, con, _ = built
    rows = dict(con.execute("select entity, (bool_and(complete_avg1s), bool_or(complete), list(distinct carried_ms order by carried_ms)) "
                            "from fleet_power_100ms where level = 'host' group by all").fetchall())
    assert rows["h100"][:2] == (True, False)  # every slot has the 1 s average, none an instantaneous value
    assert rows["a100"][1] is True
    assert rows["a100"][2] == [0, 100, 200] and rows["h100"][2][0] == 0  # ~250 ms: a value carried at most 2 slots


@pytest.mark.parametrize("host, series", [("a100", "instant"), ("h100", "avg1s")])
def test_a_one_gpu_hosts_swing_is_at_most_its_gpus_and_within_10_percent(built, host, series):
    _, _, con, _ = built
    gpu = _swings(con, f"{host}/0", "gpu", series)
    for level, entity in _entities(host).items():
        mine = _swings(con, entity, level, series)
        assert mine[2] <= gpu[2] and mine[2] >= 0.9 * gpu[2], (level, mine[2], gpu[2])
        assert all(mine[w] is None or mine[w] <= gpu[w] for w in mine), (level, mine, gpu)  # None: no complete window


def test_kernel_rows_match_the_sql_definition(built):
    data_dir, date, *_ = built
    rows = assert_kernels_match_sql(data_dir, date)
    assert {(r[0], r[3]) for r in rows if r[1] == "h100"} == {("host", "avg1s")}


def test_no_error_and_a_1s_average_host_is_not_called_incomplete(built):
    """The 7 s A100 trace loses windows at its edges (WARN); nothing is wrong (no ERROR), and the
    H100's slots, complete in the 1 s average, are not counted as missing samples."""
    outcome = built[3]
    assert not outcome.error_checks, outcome.error_checks
    assert not [c for c in outcome.failed_checks if c.check == "entities_complete"]
    assert not [c for c in outcome.failed_checks if "h100" in c.description and c.check == "windows_complete"]


def brute_force(values, ok, carried, n):
    """Every window of n ok bins, over the bins whose value was sampled at or after its start."""
    best = None
    for s in range(len(values) - n + 1):
        if ok[s: s + n].all():
            used = [values[j] for j in range(s, s + n) if j - carried[j] >= s]
            swing = float(max(used) - min(used)) if used else 0.0
            best = swing if best is None else max(best, swing)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_grid_windows_leave_out_carried_values_exactly(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 5, 10, 20]))
    bins = n * int(rng.integers(2, 30))
    values = np.round(np.cumsum(rng.standard_normal(bins)) * 50, 0 if seed % 3 == 0 else 3)
    values[rng.random(bins) < 0.02] += 500
    ok = rng.random(bins) > rng.choice([0.0, 0.02, 0.2])
    carried = np.where(rng.random(bins) < 0.5, rng.integers(1, int(rng.choice([2, 3, 10, 25])) + 1, bins), 0)
    assert grid_max_swing(values, ok, n, carried) == brute_force(values, ok, carried, n)
    aligned = grid_stats(values, ok, 100, [n // 10 or 1], 1.0, carried=carried) if n % 10 == 0 else []
    for row in aligned:  # the aligned windows under the same rule
        m = row["window_s"] * 10
        swings = [brute_force(values[s: s + m], ok[s: s + m], carried[s: s + m], m) for s in range(0, bins, m)
                  if ok[s: s + m].all()]
        assert row["windows_complete"] == len(swings)
        if swings:
            assert row["p50_swing_w"] == pytest.approx(float(np.quantile(swings, 0.5)))


def test_a_carried_value_never_widens_a_window():
    """Known answer: samples every 200 ms (slots 0, 2, 4, 6: 100, 500, 100, 100 W), each carried one
    slot. A 200 ms window holds one sample, so it swings 0 W; the carried values made the grid read
    400 W there (slot 3 holds slot 2's 500 W in the window [slot 3, slot 4]). A 300 ms window can
    hold two samples: 400 W."""
    values = np.array([100.0, 100.0, 500.0, 500.0, 100.0, 100.0, 100.0, 100.0])
    carried = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    ok = np.ones(8, bool)
    assert grid_max_swing(values, ok, 2) == 400.0  # without the rule
    assert grid_max_swing(values, ok, 2, carried) == 0.0
    assert grid_max_swing(values, ok, 3, carried) == 400.0  # [slot 2, slot 4]
