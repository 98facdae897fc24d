"""Host-and-above swings on a grid whose step is a setting (WATTLINE_GRID_STEP_MS): a known answer
that 20 ms sees and 100 ms cannot, the capture-4 slice against independently computed 20 ms bins,
the fleet-day's role and fleet rows, and the setting's errors."""

from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from collectors.settings import GRID_STEP_MS_ENV, grid_step_ms, load
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day
from tests.test_phases_event_time_real import write_capture_4

ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "fleet_power_grid", "swing_stats"]
DATE = DAY.isoformat()


def pulse(start_s: float = 100.0, seconds: float = 12.0) -> tuple[np.ndarray, np.ndarray]:
    """Samples every 10 ms: 200 W, and 600 W for the five samples 5.01–5.05 s in (a 40 ms pulse;
    power linear between samples). A 100 ms slot holding it averages its ten samples to 400 W; the
    20 ms bin [5.02, 5.04) s is 600 W exactly."""
    n = int(round(seconds / 0.01)) + 1
    t_ns = day_start_ns() + int(start_s * 1e9) + np.arange(n, dtype=np.int64) * 10_000_000
    p = np.full(n, 200.0)
    p[501:506] = 600.0
    return t_ns, p


def write_pulse_fleet(data_dir: Path) -> None:
    """Cluster c0: host a with 2 GPUs; cluster c1: host b with 1 GPU; one role, one fleet; every GPU pulses at once."""
    host = lambda name, gpus: {"name": name, "role": "inference", "gpus": [{"index": i, "tdp_w": 700.0} for i in range(gpus)]}  # noqa: E731
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": [host("a", 2)]}, {"name": "c1", "hosts": [host("b", 1)]}]}]}
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    t, p = pulse()
    for h, gpus in (("a", 2), ("b", 1)):
        for g in range(gpus):
            write_dataset(power_table(h, g, t, p), data_dir, "power", prefix=f"{h}-{g}")


def _swings(data_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("swing_stats", read_day(data_dir, "swing_stats", DATE))
    return con


def _row(con, level, entity, window_s=1, series="instant"):
    return con.execute(
        "SELECT max_swing_w, max_ramp_w_per_s, grid_step_ms FROM swing_stats WHERE level = ? AND entity = ? AND window_s = ? AND series = ?",
        [level, entity, window_s, series],
    ).fetchone()


@pytest.fixture(scope="module")
@builds_a_day
def pulse_runs(tmp_path_factory):
    """The same fleet run at 100 ms and at 20 ms (cluster-days and the fleet-day)."""
    mp = pytest.MonkeyPatch()
    out = {}
    try:
        for step in (100, 20):
            d = tmp_path_factory.mktemp(f"pulse{step}") / "data"
            write_pulse_fleet(d)
            mp.setenv(GRID_STEP_MS_ENV, str(step))
            outcome = run_day(d, DATE, selection=ASSETS)
            assert outcome.success, outcome.error
            assert not [c for c in outcome.failed_checks if c.severity == "ERROR"], outcome.failed_checks
            out[step] = _swings(d)
            out[f"dir{step}"] = d
    finally:
        mp.undo()
    return out


def test_20ms_sees_the_pulse_that_100ms_averages_away(pulse_runs):
    """Host a (2 GPUs): 400 W base, 1200 W inside the pulse on 20 ms bins (exact), 800 W on 100 ms slots."""
    swing, ramp, step = _row(pulse_runs[20], "host", "a")
    assert step == 20
    assert swing == pytest.approx(800.0, rel=1e-6)
    # the steepest step: 400 W -> the bin [5.00, 5.02) s at 2 x 500 W, in 20 ms
    assert ramp == pytest.approx(600.0 / 0.02, rel=1e-6)
    swing100, ramp100, step100 = _row(pulse_runs[100], "host", "a")
    assert step100 == 100 and swing100 == pytest.approx(400.0, rel=1e-6) and ramp100 == pytest.approx(400.0 / 0.1, rel=1e-6)
    # at the default step nothing more is built: fleet_power_100ms is the grid
    assert len(read_day(pulse_runs["dir100"], "fleet_power_grid", DATE)) == 0
    assert len(read_day(pulse_runs["dir20"], "fleet_power_grid", DATE)) > 0


def test_fleet_day_role_and_fleet_rows_are_on_the_setting(pulse_runs):
    """Role and fleet (3 GPUs in two clusters) summed across the clusters' parts: 600 W base, 1800 W in the pulse."""
    con = pulse_runs[20]
    for level, entity in (("role", "inference"), ("fleet", "f")):
        swing, _, step = _row(con, level, entity)
        assert step == 20
        assert swing == pytest.approx(1200.0, rel=1e-6)
        assert _row(pulse_runs[100], level, entity)[0] == pytest.approx(600.0, rel=1e-6)
    assert con.execute("SELECT count(*) FROM swing_stats WHERE level <> 'gpu' AND series = 'instant' AND grid_step_ms <> 20").fetchone()[0] == 0
    # the 1 s average and the GPUs' grid statistics stay on the 100 ms grid, and say so
    assert {r[0] for r in con.execute("SELECT DISTINCT grid_step_ms FROM swing_stats WHERE level = 'gpu'").fetchall()} <= {100}


def test_report_names_the_grid(pulse_runs):
    from reports.daily import build_sections

    for step in (100, 20):
        sections = {s.key: s for s in build_sections(pulse_runs[f"dir{step}"], DATE)}
        table = next(t for t in sections["swings"].blocks if getattr(t, "columns", None) and "grid (ms)" in t.columns)
        assert f"Host and above on a {step} ms grid" in table.caption
        col = table.columns.index("grid (ms)")
        assert {row[col] for row in table.rows if row[3] == "instant"} == {step}
        captions = [getattr(b, "caption", "") for b in sections["headline"].blocks]
        assert any(f"instantaneous trace on a {step} ms grid" in c for c in captions)


def test_setting_errors_name_the_allowed_steps(monkeypatch):
    assert grid_step_ms(None) == 100 and grid_step_ms("20") == 20 and grid_step_ms(" 250 ") == 250
    for bad in ("30", "0", "5", "2000", "abc", "20.5", "-20"):
        with pytest.raises(ValueError, match=r"10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000") as err:
            grid_step_ms(bad)
        assert GRID_STEP_MS_ENV in str(err.value)
    monkeypatch.setenv(GRID_STEP_MS_ENV, "30")
    with pytest.raises(ValueError, match="dividing 1000"):
        load()
    monkeypatch.setenv(GRID_STEP_MS_ENV, "20")
    assert load().grid_step_ms == 20


def bin_means(t_ns: np.ndarray, p: np.ndarray, step_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent reference: each bin's mean of the piecewise-linear power, integrated over the
    bin's edges and the samples inside it (np.interp + trapezoid), and the bins' start times; bins
    touching a sample gap > 2 s are NaN."""
    first = -(-t_ns[0] // step_ns) * step_ns
    edges = np.arange(first, t_ns[-1] + 1, step_ns)
    pts = np.union1d(t_ns, edges)
    vals = np.interp(pts, t_ns, p)
    cum = np.concatenate(([0.0], np.cumsum((vals[1:] + vals[:-1]) / 2 * np.diff(pts) / 1e9)))
    at = cum[np.searchsorted(pts, edges)]
    means = np.diff(at) / (step_ns / 1e9)
    gap_after = np.flatnonzero(np.diff(t_ns) > 2_000_000_000)
    for i in gap_after:
        means[(edges[:-1] < t_ns[i + 1]) & (edges[1:] > t_ns[i])] = np.nan
    return edges[:-1], means


def brute_force_grid_swing(means: np.ndarray, n: int) -> float:
    windows = np.lib.stride_tricks.sliding_window_view(means, n)
    ranges = windows.max(axis=1) - windows.min(axis=1)
    return float(np.nanmax(ranges))


@pytest.fixture(scope="module")
@builds_a_day
def cap4_20ms(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        d = tmp_path_factory.mktemp("grid4") / "data"
        date = write_capture_4(d)
        mp.setenv(GRID_STEP_MS_ENV, "20")
        outcome = run_day(d, date, selection=ASSETS)
        assert outcome.success, outcome.error
        con = duckdb.connect()
        con.register("swing_stats", read_day(d, "swing_stats", date))
        con.register("fleet_power_100ms", read_day(d, "fleet_power_100ms", date))
        return d, con, outcome
    finally:
        mp.undo()


def test_capture_4_host_2s_swing_at_20ms_is_the_brute_force_on_bins(cap4_20ms):
    d, con, outcome = cap4_20ms
    df = (pl.read_parquet(str(d / "power" / "**" / "*.parquet"), hive_partitioning=False)
          .filter(pl.col("source").cast(pl.Utf8) == "nvml-buffer")
          .select(pl.col("ts").dt.epoch("ns").alias("t"), pl.col("power_w").cast(pl.Float64).alias("p"))
          .group_by("t").agg(pl.col("p").mean()).sort("t"))
    _, means = bin_means(df["t"].to_numpy(), df["p"].to_numpy(), 20_000_000)
    want = brute_force_grid_swing(means, 100)
    got, _, step = con.execute(
        "SELECT max_swing_w, max_ramp_w_per_s, grid_step_ms FROM swing_stats WHERE level = 'host' AND window_s = 2 AND series = 'instant'"
    ).fetchone()
    assert step == 20
    assert got == pytest.approx(want, rel=1e-3)
    # the 100 ms slots of the same host (from fleet_power_100ms, sample means) swing less
    slots = con.execute(
        "SELECT epoch_ms(ts) // 100 AS k, power_w FROM fleet_power_100ms WHERE level = 'host' AND complete ORDER BY ts").fetchnumpy()
    dense = np.full(int(slots["k"].max() - slots["k"].min()) + 1, np.nan)
    dense[slots["k"] - slots["k"].min()] = slots["power_w"]
    at_100ms = brute_force_grid_swing(dense, 20)
    assert got >= at_100ms > 0
    assert not [c for c in outcome.failed_checks if c.severity == "ERROR"]


def test_run_says_a_bad_grid_step_in_one_line(tmp_path):
    from tests.cli_util import invoke, one_line_error

    write_pulse_fleet(tmp_path / "data")
    result = invoke("run", "--date", DATE, "--data-dir", str(tmp_path / "data"), env={GRID_STEP_MS_ENV: "30"})
    one_line_error(result, GRID_STEP_MS_ENV, "'30'", "10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000")


@pytest.mark.slow  # runs the daily job on a day of its own
def test_swings_refuse_a_grid_of_another_step(pulse_runs, tmp_path, monkeypatch):
    """fleet_power_grid built at 20 ms, swing_stats asked for 50 ms: an error naming both, not rows on the wrong grid."""
    import shutil

    d = tmp_path / "data"
    shutil.copytree(pulse_runs["dir20"], d)
    monkeypatch.setenv(GRID_STEP_MS_ENV, "50")
    outcome = run_day(d, DATE, selection=["swing_stats"])
    assert not outcome.success
    assert "fleet_power_grid" in str(outcome.error) and "50 ms" in str(outcome.error), outcome.error
