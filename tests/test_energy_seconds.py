"""energy_curve's compact form (one row per GPU-second, pipeline/series/energy.py) and the macros that read it
(sql/views/power_energy.sql): E(t) exact from E at second boundaries plus the raw samples of t's
second, on a hand-built trace with known integrals and on capture 4's real collector rows against
the energy curve of every sample (kernels.energy_curve, pipeline/phases/curve.Curve: what the table
stored before) at thousands of random instants."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.kernels import RUN_GAP_NS, energy_curve
from pipeline.phases import curve
from pipeline.series.energy import SECOND_NS, energy_at, energy_seconds
from pipeline.sqlfiles import split

S = SECOND_NS
DAY = dt.date(2026, 12, 3)
T0 = int(dt.datetime(2026, 12, 3, tzinfo=dt.UTC).timestamp()) * S
NEXT = T0 + 86_400 * S
VIEWS = Path(__file__).resolve().parent.parent / "sql" / "views"
CAPTURE_4 = Path(__file__).resolve().parent / "data" / "h200_capture_4" / "collector_power.parquet"
RANKS = {"nvml-buffer": 1, "nvml-field": 2, "simulated": 2, "nvidia-smi": 3}


def _raw(host: str, gpu: int, t_ns, power_w, source: str, average: bool = False) -> pa.Table:
    """Raw power rows as the contract has them (µs timestamps); ``average``: only power_avg_w set."""
    t_ns = np.asarray(t_ns, np.int64)
    p = pa.array(np.asarray(power_w, np.float32))
    none = pa.nulls(len(t_ns), pa.float32())
    day = (t_ns // (86_400 * S)).astype(np.int32)
    return pa.table({
        "date": pa.array(day, pa.int32()).cast(pa.date32()),
        "ts": pa.array(t_ns // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "host": [host] * len(t_ns), "gpu": pa.array(np.full(len(t_ns), gpu, np.uint8)),
        "source": [source] * len(t_ns),
        "power_w": none if average else p, "power_avg_w": p if average else none,
    })


def _connect(raw: pa.Table, date: dt.date) -> duckdb.DuckDBPyConnection:
    """A DuckDB with raw ``power``, the production views and macros, and ``energy_curve`` of ``date``
    written by the producer (one batch per GPU)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET VARIABLE partition_date = ?", [date])
    con.register("_raw", raw)
    con.execute("CREATE TABLE power AS SELECT * FROM _raw")
    day_rows = raw.filter(pc.equal(raw["date"], pa.scalar(date, pa.date32())))
    parts = []
    keys = sorted(set(zip(day_rows["host"].to_pylist(), day_rows["gpu"].to_pylist(), strict=True)))
    for host, gpu in keys:
        mine = day_rows.filter(pc.and_(pc.equal(day_rows["host"], host), pc.equal(day_rows["gpu"], gpu)))
        t, p, rank = _samples(mine)
        parts.append(energy_seconds(t, p, rank, host, gpu))
    rows = pa.Table.from_batches(parts)
    con.register("_rows", rows)
    con.execute("CREATE TABLE energy_curve AS SELECT ?::DATE AS date, host::VARCHAR AS host, * EXCLUDE (host) FROM _rows", [date])
    for name in ("power_day.sql", "power_energy.sql"):
        for statement in split((VIEWS / name).read_text()):
            con.execute(statement)
    return con


def _samples(rows: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """t_ns, power (W) and source rank (view power_day's macro) of raw rows."""
    t = rows["ts"].cast(pa.int64()).to_numpy() * 1000
    avg = rows["power_w"].is_null().to_numpy(zero_copy_only=False)
    p = np.where(avg, rows["power_avg_w"].to_numpy(zero_copy_only=False), rows["power_w"].to_numpy(zero_copy_only=False))
    rank = np.array([9 if a else RANKS.get(s, 5) for a, s in zip(avg, rows["source"].to_pylist(), strict=True)], np.uint8)
    return t, p.astype(np.float32), rank


def _macro_at(con, host: str, gpu: int, at: np.ndarray) -> np.ndarray:
    return np.array([con.execute("SELECT energy_at_ns(?, ?, ?::BIGINT)", [host, gpu, int(x)]).fetchall()[0][0] for x in at])


def _batch_at(con, host: str, gpu: int, at: np.ndarray) -> np.ndarray:
    con.register("_asked", pa.table({"host": [host] * len(at), "gpu": pa.array(np.full(len(at), gpu, np.uint8)), "t": at}))
    con.execute("CREATE OR REPLACE TEMP TABLE _asked_t AS SELECT * FROM _asked")
    got = dict(con.execute("SELECT t, e_j FROM energy_at_instants('_asked_t')").fetchall())
    return np.array([got[int(x)] for x in at])


# --- a hand-built trace: every integral known --------------------------------------------------------

RAMP_DT = 31_250_000  # 1/32 s from 1/64 s: never on a second boundary; every value exact in FLOAT


def _ramp_w(t_ns):
    """100 W at 00:00:00.015625 rising 8 W a second."""
    return 100.0 + 8.0 * (np.asarray(t_ns) - T0 - 15_625_000) / S


@pytest.fixture(scope="module")
def known():
    """h/0: a ramp sampled every 31.25 ms from 00:00:00.015625 to 00:00:29.984375, a 4 s gap, a
    ramp again 00:00:34–00:00:40 sampled every 1.5 s (seconds with no sample inside a segment);
    nvidia-smi samples at the buffer's instants with absurd values (the minute's best source is the
    buffer: left out), the buffer's sample at 10.000 s repeated as two values whose mean is on the
    ramp. Day 2 (the next UTC day): 500 W constant from 23:59:50 of day 1 across midnight to 00:00:10
    (each day its own curve: nothing crosses midnight)."""
    t1 = T0 + 15_625_000 + np.arange(0, 30 * S // RAMP_DT) * RAMP_DT
    t1 = np.union1d(t1, [T0 + 10 * S])
    t2 = T0 + 34 * S + np.arange(0, 5) * 1_500_000_000
    buf_t = np.concatenate([t1, t2])
    buf_w = _ramp_w(buf_t)
    dup_t = np.array([T0 + 10 * S, T0 + 10 * S])
    dup_w = _ramp_w(dup_t) + np.array([-40.0, 40.0])
    keep = buf_t != T0 + 10 * S
    smi_t = buf_t[::5]
    mid_t = NEXT - 10 * S + np.arange(0, 2001) * 10_000_000
    raw = pa.concat_tables([
        _raw("h", 0, buf_t[keep], buf_w[keep], "nvml-buffer"),
        _raw("h", 0, dup_t, dup_w, "nvml-buffer"),
        _raw("h", 0, smi_t, np.full(len(smi_t), 9999.0), "nvidia-smi"),
        _raw("h", 0, mid_t, np.full(len(mid_t), 500.0), "nvml-buffer"),
    ])
    return raw


def _ramp_between(a_s: float, b_s: float) -> float:
    """∫ (100 + 8 (t − 1/64)) dt over [a, b] (seconds after midnight)."""
    f = lambda x: 100.0 * x + 4.0 * (x - 0.015625) ** 2  # noqa: E731
    return f(b_s) - f(a_s)


def test_known_trace_has_exact_energy_between_any_instants(known):
    con = _connect(known, DAY)
    last1 = T0 + 15_625_000 + (30 * S // RAMP_DT - 1) * RAMP_DT  # the last sample before the gap
    cases = [
        (0.5, 1.5, _ramp_between(0.5, 1.5)),  # across a second boundary
        (0.0, 0.015625, 0.0),  # before the first sample: nothing measured
        (0.0, 2.0, _ramp_between(0.015625, 2.0)),
        (9.99, 10.01, _ramp_between(9.99, 10.01)),  # the repeated timestamp: one sample, the mean
        (3.123456, 3.123457, _ramp_between(3.123456, 3.123457)),  # inside one sample interval
        (29.0, 33.0, _ramp_between(29.0, (last1 - T0) / S)),  # into the 4 s gap: flat
        (34.0, 40.0, _ramp_between(34.0, 40.0)),  # 1.5 s spacing: seconds 36, 39 hold no sample
        (36.2, 36.7, _ramp_between(36.2, 36.7)),
        (40.0, 3600.0, 0.0),  # after the last sample of the run
        (86_390.0, 86_399.999999, 500.0 * 9.99),  # up to the day's last sample (23:59:59.99)
        (86_395.0, 86_399.995, 500.0 * 4.99),
    ]
    for a_s, b_s, want in cases:
        a, b = T0 + round(a_s * S), T0 + round(b_s * S)
        a, b = a - a % 1000, b - b % 1000  # TIMESTAMPTZ: µs
        got = con.execute("SELECT energy_between('h', 0, make_timestamptz(?::BIGINT), make_timestamptz(?::BIGINT))",
                          [a // 1000, b // 1000]).fetchall()[0][0]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (a_s, b_s)
    # the day's total (E after its last sample) is the sum of both runs and the evening's 500 W
    total = _ramp_between(0.015625, (last1 - T0) / S) + _ramp_between(34.0, 40.0) + 500.0 * 9.99
    assert con.execute("SELECT energy_at_ns('h', 0, ?::BIGINT)", [NEXT - 1]).fetchall()[0][0] == pytest.approx(total, rel=1e-12)
    assert con.execute("SELECT max(end_energy_j) FROM energy_curve").fetchall()[0][0] == pytest.approx(total, rel=1e-12)
    # the next day starts at 0: its first 10 s of 500 W, nothing carried over midnight
    con2 = _connect(known, DAY + dt.timedelta(days=1))
    assert con2.execute("SELECT energy_at_ns('h', 0, ?::BIGINT)", [NEXT + 5 * S]).fetchall()[0][0] == pytest.approx(2500.0, rel=1e-12)
    assert con2.execute("SELECT energy_at_ns('h', 0, ?::BIGINT)", [NEXT]).fetchall()[0][0] == 0.0


def test_known_trace_rows_are_seconds_not_samples(known):
    con = _connect(known, DAY)
    n_samples = con.execute("SELECT count(*) FROM power_day").fetchall()[0][0]
    rows = con.execute("SELECT t_ns, samples, power_w, end_power_w, source_rank FROM energy_curve ORDER BY t_ns").fetchall()
    assert sum(r[1] for r in rows) == n_samples - 1  # every best-source sample once (the repeated one as one)
    assert len(rows) < n_samples / 20
    seconds = {(r[0] - T0) // S: r for r in rows}
    assert seconds[36][1] == 0 and seconds[36][2] is not None and seconds[36][3] is not None  # inside a segment
    assert seconds[29][3] is None and not {30, 31, 32, 33} & set(seconds)  # the gap: no power, no rows
    assert seconds[86_399][3] is None  # nothing crosses midnight
    assert {r[4] for r in rows} == {1, None}  # the buffer; the nvidia-smi rows are left out


def test_many_instants_at_once_equal_one_at_a_time(known):
    con = _connect(known, DAY)
    rng = np.random.default_rng(3)
    at = np.concatenate([T0 + rng.integers(-S, 45 * S, 100) // 1000 * 1000, T0 + np.arange(0, 45) * S, [T0 + 10 * S, NEXT - 1]])
    one = _macro_at(con, "h", 0, at)
    many = _batch_at(con, "h", 0, at)
    np.testing.assert_allclose(many, one, rtol=1e-12, atol=1e-9)


# --- capture 4: the real collector's rows ------------------------------------------------------------


@pytest.fixture(scope="module")
def capture():
    """Capture 4's collector rows (nvml-buffer ~20 ms and nvml-field 100 ms, 6 min on one H200)."""
    src = pq.read_table(CAPTURE_4, columns=["ts", "host", "gpu", "source", "power_w", "power_avg_w"])
    src = src.set_column(src.schema.get_field_index("source"), "source", src["source"].cast(pa.string()))
    date = src["ts"].cast(pa.date32())
    raw = src.add_column(0, "date", date)
    day = raw["date"][0].as_py()
    t, p, rank = _samples(raw)
    k = energy_curve(t, p, rank)
    lk = k["linked"]
    pw = k["power_w"].astype(np.float32).astype(np.float64)
    old = curve.Curve(t_ns=k["t_ns"], power_w=pw, energy_j=k["energy_j"], next_t_ns=np.where(lk, np.append(k["t_ns"][1:], 0), 0),
                      next_w=np.where(lk, np.append(pw[1:], np.nan), np.nan), has_next=lk, mine=np.ones(len(pw), bool))
    return raw, day, (t, p, rank), old


def test_capture_energy_equals_the_per_sample_curve_at_random_instants(capture):
    raw, day, (t, p, rank), old = capture
    con = _connect(raw, day)
    rng = np.random.default_rng(11)
    lo, hi = int(t.min()) - 5 * S, int(t.max()) + 5 * S
    at = np.concatenate([
        rng.integers(lo, hi, 4000) // 1000 * 1000,
        old.t_ns[rng.integers(0, len(old), 500)],  # on samples
        (old.t_ns[rng.integers(0, len(old), 200)] // S) * S,  # on second boundaries
    ]).astype(np.int64)
    want = old.energy_at(at)
    day_energy = float(old.energy_j[-1])
    tol = max(1e-6, 1e-12 * day_energy)
    got = _batch_at(con, "h200-lab", 0, at)
    assert np.abs(got - want).max() <= tol, np.abs(got - want).max()
    rows = pa.Table.from_batches([energy_seconds(t, p, rank, "h200-lab", 0)])
    np.testing.assert_allclose(energy_at(rows, t, p, rank, at[:1000]), want[:1000], rtol=0, atol=tol)
    some = at[rng.integers(0, len(at), 60)]  # the ad-hoc macro, one instant at a time
    assert np.abs(_macro_at(con, "h200-lab", 0, some) - old.energy_at(some)).max() <= tol
    assert con.execute("SELECT count(*) FROM energy_curve").fetchall()[0][0] < len(old) / 40


def gpu_runs(t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oracle of power_runs(kind): [lo, hi) spans of sorted sample instants where consecutive samples
    are at most RUN_GAP_NS apart (what the energy curve integrates), over every sample; a lone sample
    spans nothing."""
    if len(t_ns) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    cut = np.flatnonzero(np.diff(t_ns) > RUN_GAP_NS)
    lo = np.r_[t_ns[0], t_ns[cut + 1]]
    hi = np.r_[t_ns[cut], t_ns[-1]]
    keep = hi > lo
    return lo[keep], hi[keep]


def _power_runs(raw: pa.Table, day: dt.date, held: list[tuple[str, str, int, int]]) -> list[tuple]:
    """power_runs(kind) (sql/views/power_runs.sql) of h200-lab/0, both kinds, on ``raw`` with ``held`` as its
    gpu_assignments (kind, name, from_ns, to_ns), sorted."""
    con = _connect(raw, day)
    con.execute("CREATE TABLE gpu_assignments (host VARCHAR, gpu UTINYINT, kind VARCHAR, name VARCHAR, from_ns BIGINT, to_ns BIGINT)")
    con.executemany("INSERT INTO gpu_assignments VALUES ('h200-lab', 0, ?, ?, ?, ?)", held)
    for statement in split((VIEWS / "power_runs.sql").read_text()):
        con.execute(statement)
    return con.execute("SELECT kind, name, lo_ns, hi_ns FROM (FROM power_runs('endpoint') UNION ALL FROM power_runs('job')) ORDER BY lo_ns, kind").fetchall()


def _oracle_runs(t_ns: np.ndarray, held: list[tuple[str, str, int, int]]) -> list[tuple]:
    lo, hi = gpu_runs(np.sort(np.unique(t_ns)))
    out = []
    for kind, name, from_ns, to_ns in held:
        a, b = np.maximum(lo, from_ns), np.minimum(hi, to_ns)
        out += [(kind, name, int(x), int(y)) for x, y in zip(a, b, strict=True) if y > x]
    return sorted(out, key=lambda r: (r[2], r[0]))


def test_capture_power_runs_in_sql_equal_runs_over_every_sample(capture):
    """The measured spans from energy_curve's seconds (LAG over first/last sample of each second) are
    the runs over every raw sample: whole, with a 3 s gap cut into the trace, and cut to the windows in
    which an endpoint, then a job held the GPU (a window that ends inside a run cuts it there)."""
    raw, day, (t, p, rank), old = capture
    ts = raw["ts"].cast(pa.int64()).to_numpy() * 1000
    start = int(old.t_ns[0])
    whole = [("endpoint", "ep", -(2**62), 2**62)]
    assert _power_runs(raw, day, whole) == _oracle_runs(old.t_ns, whole)
    gap = (ts < start + 60 * S) | (ts > start + 63 * S)
    handed = [("endpoint", "ep", -(2**62), start + 100 * S + 123), ("job", "train", start + 100 * S + 123, start + 200 * S),
              ("job", "train", NEXT, NEXT + S)]  # the last: another day, no span
    got = _power_runs(raw.filter(pa.array(gap)), day, handed)
    want = _oracle_runs(old.t_ns[(old.t_ns < start + 60 * S) | (old.t_ns > start + 63 * S)], handed)
    assert len(want) == 3 and got == want


@pytest.mark.parametrize("seed", range(4))
def test_union_of_second_keys_is_numpys_union1d(seed):
    """energy_seconds' union of the seconds holding a sample and the seconds a segment crosses
    (sorted, distinct) equals np.union1d's, repeats within and across the two, empty sides included."""
    from pipeline.series.energy import _union

    rng = np.random.default_rng(seed)
    owned = np.unique(rng.integers(0, 500, 300)) + 1_780_000_000
    crossed = np.sort(rng.integers(0, 520, 200)) + 1_780_000_000
    for a, b in ((owned, crossed), (crossed, owned), (owned, crossed[:0]), (owned[:0], crossed), (owned[:0], crossed[:0]), (owned[:1], owned[:1])):
        got = _union(a, b)
        np.testing.assert_array_equal(got, np.union1d(a, b))
        assert got.dtype == np.union1d(a, b).dtype


def test_a_gpu_without_samples_has_a_curve_of_no_rows():
    """curves() hands out an empty curve for a GPU asked for that has no samples (its only file of
    the day gone since energy_curve listed it): every column has no row, so a reader of the next
    sample (the grid's gpu_curve) gets none rather than an index error."""
    from pipeline.grid import gpu_curve

    k = energy_curve(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.uint8))
    assert {name: len(v) for name, v in k.items()} == dict.fromkeys(k, 0)
    c = curve.curve_of(curve._no_samples("h", 0))
    assert (len(c.next_t_ns), len(c.next_w)) == (0, 0)
    assert {name: len(v) for name, v in gpu_curve(c).items()} == dict.fromkeys(["t_ns", "power_w", "energy_j", "next_t_ns", "next_w"], 0)
