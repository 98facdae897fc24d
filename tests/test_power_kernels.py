"""The series engine's energy_curve, power_100ms and power_1s (pipeline/series/) against their SQL
oracles (tests/oracles/<table>.sql, run as-is on the same raw files): the same rows (energy_curve's
energy within float summation order), on a messy day (sources switching per minute, unsorted files,
repeated timestamps, a 1 s average from another source, 1 s averages only, gaps, a second host)."""

import datetime

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.parquet_sink import write_dataset
from pipeline import kernels
from pipeline.runner import run_day
from pipeline.series.engine import host_by_gpu
from pipeline.warehouse import compute_connection
from tests.builders import DAY, day_start_ns, power_table, two_host_inventory
from tests.days import builds_a_day
from tests.oracles import oracle_query
from tests.test_power_swings import assert_kernels_match_sql

DATE = DAY.isoformat()
T0 = day_start_ns()
S = 1_000_000_000
COLUMNS = "host, gpu, t_ns, first_t_ns, last_t_ns, samples, source_rank, energy_j, end_energy_j, power_w, end_power_w"


def _with_avg(table, avg, null):
    """``table`` with the driver's 1 s average column set (NULL where ``null``)."""
    i = table.schema.get_field_index("power_avg_w")
    return table.set_column(i, "power_avg_w", pa.array(avg, table.schema.field(i).type, mask=null))


def _avg_only(host, gpu, t, p):
    """Rows with only the driver's 1 s average (power_w NULL): is_average samples."""
    table = power_table(host, gpu, t, p, source="nvidia-smi")
    i = table.schema.get_field_index("power_w")
    avg = table.column(i)
    table = table.set_column(i, "power_w", pa.nulls(len(t), avg.type))
    return table.set_column(table.schema.get_field_index("power_avg_w"), "power_avg_w", avg)


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    rng = np.random.default_rng(15)
    d = tmp_path_factory.mktemp("curve_kernel") / "data"
    two_host_inventory(d)
    # train-0/0: nvml-buffer ~50 Hz for minutes 0-1 and 4 (jittered µs times, a 3 s gap), nvml-field
    # 10 Hz throughout (used only in minutes 2-3, where the buffer is silent), a repeated timestamp
    tb = T0 + np.sort(rng.integers(0, 120 * S, 6000) // 1000 * 1000)
    tb = np.concatenate([tb[(tb < T0 + 50 * S) | (tb > T0 + 53 * S)], T0 + 240 * S + np.arange(500) * 20_000_000])
    pb = 300 + 200 * rng.random(len(tb))
    dup_t = np.repeat(tb[100:110], 2)
    dup_p = 300 + 200 * rng.random(len(dup_t))
    tf = T0 + np.arange(0, 300 * 10) * 100_000_000
    pf = 250 + 100 * rng.random(len(tf))
    perm = rng.permutation(len(tb))  # the file is not in time order
    write_dataset(power_table("train-0", 0, tb[perm], pb[perm], source="nvml-buffer"), d, "power", prefix="a")
    write_dataset(power_table("train-0", 0, dup_t, dup_p, source="nvml-buffer"), d, "power", prefix="b")
    field = _with_avg(power_table("train-0", 0, tf, pf, source="nvml-field"), pf - 20, np.arange(len(tf)) % 7 == 3)
    write_dataset(field, d, "power", prefix="c")
    # train-0/1: 1 s averages only, with a 10 s gap; train-1/0 (second host): nvml-field, 2 files
    ta = T0 + np.r_[np.arange(0, 60), np.arange(70, 130)] * S
    write_dataset(_avg_only("train-0", 1, ta, 400 + 50 * rng.random(len(ta))), d, "power", prefix="d")
    t2 = T0 + 7 * S + np.arange(1200) * 100_000_000
    p2 = 500 + 100 * rng.random(len(t2))
    write_dataset(power_table("train-1", 0, t2[600:], p2[600:]), d, "power", prefix="e")
    write_dataset(power_table("train-1", 0, t2[:600], p2[:600]), d, "power", prefix="f")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "fleet_power_1s", "fleet_power_100ms", "swing_stats"])
    assert outcome.success, outcome.error
    assert not [c for c in outcome.failed_checks if c.asset == "energy_curve"], outcome.failed_checks
    return d


def test_kernel_rows_match_sql_definition(day):
    with compute_connection(day, DATE) as con:
        kernel = con.execute(f"SELECT {COLUMNS} FROM energy_curve").fetchall()
        query = oracle_query(con, "energy_curve")
        sql = con.execute(f"SELECT {COLUMNS} FROM ({query}) ORDER BY host, gpu, t_ns").fetchall()
    for host in ("train-0", "train-1"):  # each cluster's part is written sorted by (host, gpu, t_ns)
        part = [r for r in kernel if r[0] == host]
        assert part == sorted(part, key=lambda r: (r[1], r[2]))
    kernel.sort(key=lambda r: (r[0], r[1], r[2]))
    assert len(kernel) == len(sql) > 400
    assert {(r[0], r[1]) for r in kernel} == {("train-0", 0), ("train-0", 1), ("train-1", 0)}
    assert {r[6] for r in kernel} == {1, 2, 9}, "buffer, field and 1 s averages"
    assert any(r[9] is None for r in kernel) and any(r[10] is None for r in kernel), "gaps leave P undefined"
    for k, s in zip(kernel, sql, strict=True):
        assert k[:7] == s[:7], (k, s)  # keys, second, its samples, their source: exact
        # energies and powers: the same trapezoids, summed in another order (numpy cumsum vs DuckDB's window)
        for a, b in zip(k[7:], s[7:], strict=True):
            assert (a is None) == (b is None), (k, s)
            if a is not None:
                assert a == pytest.approx(b, rel=1e-12, abs=1e-9), (k, s)


GRID_COLUMNS = "host, gpu, ts, power_w, samples, source, power_avg_w, is_average"


def test_grid_kernel_rows_match_sql_definition(day):
    with compute_connection(day, DATE) as con:
        kernel = con.execute(f"SELECT {GRID_COLUMNS} FROM power_100ms").fetchall()
        query = oracle_query(con, "power_100ms")
        sql = con.execute(f"SELECT {GRID_COLUMNS} FROM ({query}) ORDER BY host, gpu, ts").fetchall()
    for host in ("train-0", "train-1"):  # each cluster's part is written sorted by (host, gpu, ts)
        part = [r for r in kernel if r[0] == host]
        assert part == sorted(part, key=lambda r: (r[1], r[2]))
    kernel.sort(key=lambda r: (r[0], r[1], r[2]))
    assert len(kernel) == len(sql) > 1000
    assert any(r[4] > 1 for r in kernel), "slots with several samples are averaged"
    assert any(r[5] == "nvml-buffer" and r[6] is not None for r in kernel), "the 1 s average taken from nvml-field"
    assert any(r[5] == "nvml-buffer" and r[6] is None for r in kernel)
    assert kernel == sql  # exact: means of a few float32 values in float64 do not depend on the order


@pytest.mark.slow  # runs the daily job on a day of its own
def test_damaged_file_met_by_a_kernel_write_is_quarantined_and_the_rest_written(tmp_path):
    """A raw file with damaged data pages first read by a streamed kernel write (power_1s, which
    usually meets it first, built before the damage): the warehouse quarantines it and the write
    runs again over the other files (the stream of the first attempt is spent)."""
    from tests.builders import write_square_fleet
    from tests.faults import inject

    d = tmp_path / "data"
    write_square_fleet(d, seconds=10)
    assert run_day(d, DATE, selection=["power_1s"]).success
    damaged = next((d / "power" / f"date={DATE}" / "host=train-0").glob("train-0-0*.parquet"))
    inject.damage_data_pages(damaged)
    outcome = run_day(d, DATE, selection=["energy_curve", "power_100ms"])
    # Both written; power_1s still holds the quarantined file's samples from before the damage, and
    # the two ERROR checks that compare with it say so (blocking: the run reports the failure).
    assert {"energy_curve", "power_100ms"} <= set(outcome.materialized), outcome.error
    assert {(c.asset, c.check) for c in outcome.failed_checks} == {("energy_curve", "matches_power_1s"),
                                                                  ("power_100ms", "samples_conserved")}, outcome.error
    assert not damaged.exists(), "moved to the quarantine"
    with compute_connection(d, DATE) as con:
        for table in ("energy_curve", "power_100ms"):
            gpus = con.execute(f"SELECT DISTINCT host, gpu FROM {table} ORDER BY ALL").fetchall()
            assert gpus == [("infer-0", 0), ("infer-0", 1), ("train-0", 1)], table


SECOND_COLUMNS = "host, gpu, ts, mean_w, min_w, max_w, samples, gap_before, duplicate_samples, source, is_average, energy_j"


def test_seconds_kernel_rows_match_sql_definition(day):
    with compute_connection(day, DATE) as con:
        kernel = con.execute(f"SELECT {SECOND_COLUMNS} FROM power_1s").fetchall()
        query = oracle_query(con, "power_1s")
        sql = con.execute(f"SELECT {SECOND_COLUMNS} FROM ({query}) ORDER BY host, gpu, ts").fetchall()
    kernel.sort(key=lambda r: (r[0], r[1], r[2]))
    assert len(kernel) == len(sql) > 300
    assert sum(r[8] for r in kernel) >= 10, "the repeated timestamps are counted"
    repeated = {(r[0], r[1], r[2]) for r in kernel if r[8]}
    for k, s in zip(kernel, sql, strict=True):
        assert k[:11] == s[:11], (k, s)
        # energy: exact (both sum the terms rounded to 1e-12 J as integers), except next to repeated
        # timestamps, where the SQL's lag takes the tied rows in any order
        if not repeated & {(k[0], k[1], k[2]), (k[0], k[1], k[2] - datetime.timedelta(seconds=1))}:
            assert k[11] == s[11], (k, s)


def test_swing_kernels_match_sql_definition(day):
    """swing_stats' kernels (GPU rows from the slots with the carry rule, the levels above from
    fleet_power_100ms) against the SQL file run alone, on the messy day: sources switching, 1 s
    averages only on one GPU, gaps, repeated timestamps, a host missing from the inventory."""
    rows = assert_kernels_match_sql(day, DATE)
    assert {r[1] for r in rows if r[0] == "gpu"} == {"train-0/0", "train-0/1"}  # train-1 is not in the inventory: left out
    assert {r[3] for r in rows if r[1] == "train-0/1"} == {"avg1s"}, "1 s averages only: no instant series"



@pytest.mark.parametrize("layout", ["runs", "interleaved"])
def test_host_rows_split_by_gpu_in_order(layout):
    """host_by_gpu: each GPU's rows in read order, whether the rows come in runs of one GPU
    (sliced) or interleaved row by row (sorted by gpu, stably)."""
    rng = np.random.default_rng(3)
    gpu = np.repeat(np.arange(4), 30_000) if layout == "runs" else rng.integers(0, 4, 120_000)
    con = duckdb.connect(config={"threads": 1})
    con.register("rows", pa.table({"gpu": gpu.astype(np.uint8), "i": np.arange(len(gpu))}))
    got = {g: x["i"] for g, x in host_by_gpu(con, "SELECT gpu, i FROM rows", {})}
    assert sorted(got) == [0, 1, 2, 3]
    for g, i in got.items():
        assert i.tolist() == np.flatnonzero(gpu == g).tolist()


@pytest.mark.parametrize("width_ns", [60_000_000_000, 1_000_000_000, 100_000_000])
@pytest.mark.parametrize("spacing_ns", [20_000_000, 3_000_000_000])
def test_time_runs_are_the_runs_of_equal_buckets(width_ns, spacing_ns):
    """kernels.time_runs (bucket bounds looked up where the buckets are few, rows compared where
    they are many): each bucket's first row and count, as dividing every row gives them, times
    before the epoch included."""
    rng = np.random.default_rng(5)
    t = np.sort(-7 * 10**9 + np.cumsum(rng.integers(0, 2 * spacing_ns, 20_000)))
    bucket = t // width_ns
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    got = kernels.time_runs(t, width_ns)
    assert got[0].tolist() == starts.tolist()
    assert got[1].tolist() == np.diff(np.r_[starts, len(t)]).tolist()
    assert kernels.time_runs(t[:1], width_ns)[1].tolist() == [1]


def test_round_half_away_is_exact_decimal_rounding():
    """seconds_1s' energy terms round halves away from zero (the oracle's round()): equal to
    Decimal's ROUND_HALF_UP of each double's exact value, at ties, next to them and far out."""
    from decimal import ROUND_HALF_UP, Decimal

    rng = np.random.default_rng(8)
    halves = np.arange(-300, 300) + 0.5
    v = np.concatenate([halves, np.nextafter(halves, 0), np.nextafter(halves, np.inf), rng.normal(0, 1e6, 3000),
                        rng.integers(-10**12, 10**12, 3000) * 0.5, [0.0, -0.0, 0.49999999999999994, 2.0**52 + 1, 4503599627370495.5]])
    want = [int(Decimal(float(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP)) for x in v]
    assert kernels._round_half_away(v).astype(np.int64).tolist() == want
