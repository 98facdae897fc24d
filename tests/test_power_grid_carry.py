"""A grid finer than the sampling never widens a window. On a 20 ms grid, each bin of a GPU sampled
every 250 ms is its exact mean power between the two samples around it, which may lie outside a
swing window; fleet_power_grid's carried_ms / ahead_ms say how far, and the window leaves such
bins out. A ramp of 10 W/s sampled every 250 ms: the GPU's own samples swing 17.5 W in 2 s (seven
2.5 W steps); the one-GPU host's 2 s swing on the grid read 19.8 W before (it interpolated toward
samples outside the window), now at most the GPU's and within 10 % of it."""

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from collectors.settings import GRID_STEP_MS_ENV
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day

ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "fleet_power_grid", "swing_stats"]


@pytest.fixture(scope="module")
@builds_a_day
def ramp(tmp_path_factory):
    d = tmp_path_factory.mktemp("carry20") / "data"
    d.mkdir()
    host = {"name": "h", "role": "training", "gpus": [{"index": 0, "tdp_w": 700.0}]}
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [host]}]}]}), d / "inventory.yaml")
    t = day_start_ns() + 3600 * 10**9 + 5_000_000 + np.arange(240, dtype=np.int64) * 250_000_000  # 5 ms off the bins' edges
    s = (t - t[0]) / 1e9
    write_dataset(power_table("h", 0, t, 100 + 10 * np.minimum(s, 60 - s), source="nvidia-smi"), d, "power")
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv(GRID_STEP_MS_ENV, "20")
        out = run_day(d, DAY.isoformat(), selection=ASSETS)
    finally:
        mp.undo()
    assert out.success, out.error
    con = duckdb.connect()
    con.register("ss", read_day(d, "swing_stats", DAY.isoformat()))
    con.register("grid", read_day(d, "fleet_power_grid", DAY.isoformat()))
    return con


@pytest.mark.parametrize("window_s", [1, 2, 10])
def test_a_one_gpu_hosts_20ms_swing_is_at_most_its_gpus_and_within_10_percent(ramp, window_s):
    got = {(lv, st): w for lv, w, st in ramp.execute(
        "SELECT level, max_swing_w, grid_step_ms FROM ss WHERE series = 'instant' AND window_s = ? AND level IN ('gpu', 'host')",
        [window_s]).fetchall()}
    gpu, host = got[("gpu", 100)], got[("host", 20)]
    assert gpu == pytest.approx(10 * window_s - 2.5)  # the samples a window holds: one 2.5 W step fewer than its 10 W/s
    assert 0.9 * gpu <= host <= gpu + 1e-6, (window_s, host, gpu)


def test_fleet_power_grid_says_how_far_its_bins_lean(ramp):
    """Samples 250 ms apart, 5 ms past a bin's edge: every bin leans on a sample in the bin before
    and one in the bin after it (at least 20 ms), at most 13 bins (260 ms) away."""
    assert ramp.execute(
        "SELECT max(carried_ms), max(ahead_ms), min(carried_ms), min(ahead_ms) FROM grid WHERE level = 'host' AND complete"
    ).fetchone() == (260, 260, 20, 20)
