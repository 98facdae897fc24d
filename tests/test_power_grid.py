"""power_100ms on constructed traces: exact slot means, sample counts, best source, gap check."""

import duckdb
import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table, square_wave, two_host_inventory
from tests.days import builds_a_day

DATE = DAY.isoformat()


def _grid(data_dir):
    con = duckdb.connect()
    con.register("g", read_day(data_dir, "power_100ms", DATE))
    return con


def _write(data_dir, host, gpu, t_ns, p, source):
    write_dataset(power_table(host, gpu, t_ns, p, source=source), data_dir, "power", prefix=f"{host}-{gpu}-{source}")


@pytest.fixture(scope="module")
@builds_a_day
def grid(tmp_path_factory):
    """train-0/0: 50 Hz driver buffer ramp + a 10 Hz field trace over the same minute (buffer must win);
    train-0/1: 10 Hz square wave; infer-0/0: 4 Hz nvidia-smi (slots left empty)."""
    data_dir = tmp_path_factory.mktemp("grid") / "data"
    two_host_inventory(data_dir)
    t0 = day_start_ns()
    t_buf = t0 + np.arange(3000, dtype=np.int64) * 20_000_000  # 60 s at 50 Hz
    _write(data_dir, "train-0", 0, t_buf, 100.0 + np.arange(3000) % 5, "nvml-buffer")
    _write(data_dir, "train-0", 0, t0 + np.arange(600, dtype=np.int64) * 100_000_000, np.full(600, 999.0), "nvml-field")
    _write(data_dir, "train-0", 1, *square_wave(60, 4.0, 100.0, 700.0), "nvml-field")
    _write(data_dir, "infer-0", 0, t0 + np.arange(240, dtype=np.int64) * 250_000_000, np.full(240, 300.0), "nvidia-smi")
    outcome = run_day(data_dir, DATE, selection=["power_1s", "power_100ms"])
    assert outcome.success, outcome.error
    return _grid(data_dir), outcome


def test_slot_means_and_counts(grid):
    con, _ = grid
    # 50 Hz buffer: 5 samples per slot, values 100..104 → mean exactly 102; the 999 W field trace is not mixed in.
    assert con.execute(
        "select count(*), min(samples), max(samples), min(power_w), max(power_w), any_value(source) from g where host='train-0' and gpu=0"
    ).fetchone() == (600, 5, 5, 102.0, 102.0, "nvml-buffer")
    wave = con.execute("select power_w from g where host='train-0' and gpu=1 order by ts").fetchall()
    assert [w for (w,) in wave[:45]] == [700.0] * 20 + [100.0] * 20 + [700.0] * 5
    # 4 Hz: 240 samples in 240 distinct slots of 600.
    assert con.execute("select count(*), sum(samples) from g where host='infer-0'").fetchone() == (240, 240)


def test_slots_are_aligned_100ms_starts(grid):
    con, _ = grid
    assert con.execute("select count(*) from g where epoch_ms(ts) % 100 <> 0").fetchone()[0] == 0
    first = con.execute("select min(ts) from g").fetchone()[0]
    assert first.timestamp() == day_start_ns() / 1e9
    assert con.execute("select typeof(ts), typeof(power_w) from g limit 1").fetchone() == ("TIMESTAMP WITH TIME ZONE", "FLOAT")


def test_checks(grid):
    _, outcome = grid
    failed = {(c.asset, c.check) for c in outcome.failed_checks}
    assert ("power_100ms", "samples_conserved") not in failed
    assert ("power_100ms", "grid_gaps") in failed  # the 4 Hz GPU leaves 60% of its slots empty
