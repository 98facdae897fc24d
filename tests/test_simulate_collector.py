"""`simulate --shape collector`: the rows, files and statistics of what `wattline collect` writes.

Compared with the real collector's files from capture 4 (tests/data/h200_capture_4, SOURCE.md).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from collectors.contract import DATASETS, epoch_ns, schema_problems
from collectors.nvml.compact import _hour_of, compact_power
from collectors.nvml.rows import BUFFER, FIELD
from collectors.simulate import simulate
from collectors.simulate.shape_stats import collector_stats
from tests.days import TINY_COLLECTOR_HOURS

REAL = Path(__file__).parent / "data" / "h200_capture_4" / "collector_power.parquet"
DAY = dt.date(2026, 12, 3)


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("simc")
    simulate(root, start=DAY, seed=5, fleet="tiny", hours=0.12, shape="collector")
    return root


@pytest.fixture(scope="module")
def power(sim) -> pa.Table:
    return pa.concat_tables(pq.read_table(p) for p in sorted((sim / "power").rglob("*.parquet")))


@pytest.fixture(scope="module")
def real_stats() -> dict[str, float]:
    return collector_stats(pq.read_table(REAL), "h200-lab", 0)


def test_files_follow_the_contract_and_the_compacted_collector_layout(sim, tmp_path):
    files = sorted(sim.glob(DATASETS["power"].glob()))
    assert [f.parent.name for f in files] == ["host=infer-0", "host=train-0"]
    for f in files:
        assert schema_problems(pq.read_table(f).schema, DATASETS["power"].schema) == [], f
        assert _hour_of(f.name) == "20261203T00", f.name  # compaction reads it as one closed hour's file
    copy = tmp_path / "copy"
    shutil.copytree(sim, copy)
    assert compact_power(copy, now_unix_s=4e9).hours == 0  # one file an hour: nothing left to merge


def test_rows_are_sorted_like_the_collectors_and_buffer_rows_carry_power_only(power):
    t = power.filter(pc.equal(power["host"], "infer-0"))
    keys = list(zip(t["gpu"].to_pylist(), t["source"].cast(pa.string()).to_pylist(), epoch_ns(t["ts"]).to_pylist(), strict=False))
    assert keys == sorted(keys)
    src = power["source"].cast(pa.string())
    assert set(src.to_pylist()) == {BUFFER, FIELD}
    buf = power.filter(pc.equal(src, BUFFER))
    for col in ("power_avg_w", "energy_j", "sm_clock_mhz", "temp_c", "power_limit_w"):
        assert buf[col].null_count == buf.num_rows, col
    assert buf["power_w"].null_count == 0


def test_energy_counter_integrates_the_buffer(power):
    """Counter deltas equal the integral of the driver samples (each held until the next) to < 0.5 %."""
    g = power.filter(pc.and_(pc.equal(power["host"], "train-0"), pc.equal(power["gpu"], 1)))
    src = g["source"].cast(pa.string())
    b = g.filter(pc.equal(src, BUFFER))
    e = g.filter(pc.and_(pc.equal(src, FIELD), pc.is_valid(g["energy_j"])))
    bt, bw = epoch_ns(b["ts"]).to_numpy(), b["power_w"].to_numpy().astype(float)
    et, ej = epoch_ns(e["ts"]).to_numpy(), e["energy_j"].to_numpy()
    assert len(et) >= 10 and np.all(np.diff(ej) > 0)
    m = (bt >= et[1]) & (bt < et[-1])
    integral = np.sum(bw[m][:-1] * np.diff(bt[m]) / 1e9)
    assert integral == pytest.approx(ej[-1] - ej[1], rel=0.005)


@pytest.mark.parametrize("host, gpu", [("infer-0", 0), ("train-0", 0)])
def test_statistics_match_the_real_collector(power, real_stats, host, gpu):
    s = collector_stats(power, host, gpu)
    assert s["buffer_rows_per_s"] == pytest.approx(real_stats["buffer_rows_per_s"], rel=0.05)
    assert s["field_rows_per_s"] == pytest.approx(real_stats["field_rows_per_s"], rel=0.02)
    for k in ("buffer_gap_median_ms", "buffer_gap_p10_ms", "buffer_gap_p90_ms", "field_gap_median_ms"):
        assert s[k] == pytest.approx(real_stats[k], rel=0.05), k
    assert s["energy_every_s"] == pytest.approx(real_stats["energy_every_s"], abs=0.001)
    assert s["slow_fields_every_s"] == pytest.approx(real_stats["slow_fields_every_s"], abs=0.001)
    assert abs(s["avg1s_lag_s"] - real_stats["avg1s_lag_s"]) <= 0.04


def test_same_seed_same_bytes(tmp_path):
    for name in ("a", "b"):
        simulate(tmp_path / name, start=DAY, seed=2, fleet="tiny", hours=0.01, shape="collector")
    files = lambda r: {str(p.relative_to(r)): p.read_bytes() for p in sorted(r.rglob("*.parquet"))}  # noqa: E731
    assert files(tmp_path / "a") == files(tmp_path / "b")


def test_wattline_run_computes_the_collector_shape(tiny_collector_day):
    """The shared day (``tests.days.tiny_collector_day``: 6 minutes of the tiny fleet in this shape,
    every table built by the daily job)."""
    sim, outcome, date = tiny_collector_day.data_dir, tiny_collector_day.outcome, tiny_collector_day.date
    assert outcome.success, outcome.error
    # only warnings: 6 minutes of a day (gpu_coverage); the requests still running when those 6 minutes
    # (and their power) stop are partly covered (power_coverage); power-only prefill detection may
    # disagree with the request log on these calibrated, spiky traces as on the real capture
    # (power_segmentation_agreement)
    failed = {c.check: c.severity for c in outcome.failed_checks}
    assert "gpu_coverage" in failed and set(failed) <= {"gpu_coverage", "power_coverage", "power_segmentation_agreement"}, failed
    assert all(str(v).endswith("WARN") for v in failed.values()), failed
    if "power_coverage" in failed:  # exactly the requests that end after the simulated window
        from pipeline import warehouse

        window_end = dt.datetime.combine(dt.date.fromisoformat(date), dt.time(0), tzinfo=dt.UTC) + dt.timedelta(hours=TINY_COLLECTOR_HOURS)
        with warehouse.compute_connection(sim, date) as con:
            partly = con.execute("SELECT min(r.end_ts), count(*) FROM request_energy AS e JOIN requests AS r USING (request_id) "
                                 "WHERE e.power_coverage < 1").fetchone()
            after = con.execute("SELECT count(*) FROM requests WHERE end_ts > ?", [window_end]).fetchone()[0]
        assert partly[1] == after and partly[0] > window_end, (partly, after)


def test_cli_shape_flag(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import main

    res = CliRunner().invoke(main, ["simulate", "--fleet", "tiny", "--hours", "0.01", "--start", "2026-12-03",
                                    "--shape", "collector", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    t = pa.concat_tables(pq.read_table(p) for p in tmp_path.rglob("power/*/*/*.parquet"))
    assert set(t["source"].cast(pa.string()).to_pylist()) == {BUFFER, FIELD}
    bad = CliRunner().invoke(main, ["simulate", "--shape", "dense", "--data-dir", str(tmp_path)])
    assert bad.exit_code == 2
