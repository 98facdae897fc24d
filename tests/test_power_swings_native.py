"""GPU swings on the raw samples, against a brute-force window over the collector's own rows
(tests/data/h200-capture-4: nvml-buffer at ~20 ms, nvml-field every 100 ms with the 1 s average)."""

from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from pipeline.warehouse import read_day
from tests.test_power_swings import assert_kernels_match_sql

ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "swing_stats"]


def brute_force_swing(t_ns: np.ndarray, p: np.ndarray, window_s: float) -> float:
    """max over samples i of (max − min of the samples in (t_i − W, t_i]): every window, one by one."""
    best = 0.0
    lo = np.searchsorted(t_ns, t_ns - int(window_s * 1e9), side="right")
    for i in range(len(t_ns)):
        w = p[lo[i]: i + 1]
        best = max(best, float(w.max() - w.min()))
    return best


def _rows(data_dir: Path, source: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    df = (pl.read_parquet(str(data_dir / "power" / "**" / "*.parquet"), hive_partitioning=False)
          .filter((pl.col("source").cast(pl.Utf8) == source) & pl.col(column).is_not_null())
          .select(pl.col("ts").dt.epoch("ns").alias("t"), pl.col(column).cast(pl.Float64).alias("p"))
          .group_by("t").agg(pl.col("p").mean()).sort("t"))
    return df["t"].to_numpy(), df["p"].to_numpy()


@pytest.fixture(scope="module")
def cap4(capture_4_day):
    d, date, outcome = capture_4_day.data_dir, capture_4_day.date, capture_4_day.outcome
    assert set(ASSETS) <= capture_4_day.tables(), outcome.materialized
    con = duckdb.connect()
    con.register("swing_stats", read_day(d, "swing_stats", date))
    return d, con, outcome


def _swing(con, level, series, window_s):
    return con.execute(
        "SELECT max_swing_w, sample_interval_ms, grid_step_ms FROM swing_stats WHERE level = ? AND series = ? AND window_s = ?",
        [level, series, window_s],
    ).fetchone()


@pytest.mark.parametrize("window_s", [1, 2, 10])
def test_gpu_instant_swing_is_the_samples_own(cap4, window_s):
    d, con, _ = cap4
    t, p = _rows(d, "nvml-buffer", "power_w")
    got, interval_ms, _ = _swing(con, "gpu", "instant", window_s)
    assert got == pytest.approx(brute_force_swing(t, p, window_s), rel=1e-3)
    assert 15 < interval_ms < 25  # the driver's ~20 ms buffer


def test_avg1s_series_exists_on_the_collectors_files(cap4):
    """The buffer rows carry no 1 s average, the field rows do: the avg1s series comes from them."""
    d, con, _ = cap4
    t, p = _rows(d, "nvml-field", "power_avg_w")
    got, interval_ms, _ = _swing(con, "gpu", "avg1s", 2)
    assert got == pytest.approx(brute_force_swing(t, p, 2), rel=1e-3)
    assert 90 < interval_ms < 110
    # ... and on the host level, on the grid
    host, _, step = _swing(con, "host", "avg1s", 2)
    assert host is not None and host > 0 and step == 100
    # what a 1 s average hides: the instantaneous swing is far larger
    assert _swing(con, "gpu", "instant", 2)[0] > 1.3 * got


def test_kernel_rows_match_the_sql_definition_with_the_1s_average(cap4):
    d, con, _ = cap4
    date = con.execute("SELECT any_value(date)::VARCHAR FROM swing_stats").fetchone()[0]
    rows = assert_kernels_match_sql(d, date)
    assert {(r[0], r[3]) for r in rows} >= {("gpu", "avg1s"), ("host", "avg1s"), ("gpu", "instant"), ("host", "instant")}


def test_checks_pass(cap4):
    _, _, outcome = cap4
    assert not [c for c in outcome.failed_checks if c.asset == "swing_stats" and c.check == "swings_consistent"]


def test_kernel_equals_brute_force_per_gpu_and_run():
    """Three GPUs with irregular 10–40 ms spacing and a 3 s hole each: windows never reach across
    the hole or into another GPU."""
    from pipeline.kernels import max_swings

    rng = np.random.default_rng(2)
    frames = []
    for g in range(3):
        t = np.cumsum(rng.integers(10_000_000, 40_000_000, 1500)).astype(np.int64) + g * 1000
        t[700:] += 3_000_000_000
        frames.append(pl.DataFrame({"gpu": np.full(len(t), g), "t_ns": t, "p": rng.normal(300, 100, len(t))}))
    got = max_swings(pl.concat(frames), (1, 2, 10))
    for g, df in enumerate(frames):
        for w in (1, 2, 10):
            runs = [df[:700], df[700:]]
            want = max(brute_force_swing(r["t_ns"].to_numpy(), r["p"].to_numpy(), w) for r in runs)
            assert got.filter((pl.col("gpu") == g) & (pl.col("window_s") == w))["max_swing_w"][0] == pytest.approx(want, rel=1e-12)


def test_report_lists_gpu_swings_on_samples_beside_the_1s_average(cap4):
    from reports.daily import build_sections

    d, con, _ = cap4
    swings = next(s for s in build_sections(d, "2026-12-03") if s.key == "swings")
    table = next(t for t in swings.blocks if getattr(t, "columns", None) and t.columns[0] == "GPU")
    (gpu, swing_w, _, spacing_ms, avg1s_w), = table.rows
    assert gpu == "h200-lab/0" and spacing_ms == 20
    assert swing_w == pytest.approx(_swing(con, "gpu", "instant", 2)[0], abs=1)
    assert avg1s_w == pytest.approx(_swing(con, "gpu", "avg1s", 2)[0], abs=1)
