"""pipeline/phases/curve.py against the SQL macros of sql/views/power_energy.sql: E(t) at many instants
by a sorted search over the curve rebuilt from the raw samples must be the macros' values (within
rounding), P(t) the line between the samples around t, and the peak inside [lo, hi) the highest
sample there (brute force)."""

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from pipeline.phases import curve
from pipeline.series.energy import energy_seconds
from pipeline.sqlfiles import split

DAY = dt.date(2026, 12, 3)
T0 = int(dt.datetime(2026, 12, 3, tzinfo=dt.UTC).timestamp()) * 10**9
VIEWS = Path(__file__).resolve().parent.parent / "sql" / "views"


@pytest.fixture(scope="module")
def con():
    """2,000 raw nvml-buffer samples ~20 ms apart with jitter (µs), a 3 s gap after sample 700, stored
    unsorted; energy_curve written by its producer; the views and macros loaded."""
    rng = np.random.default_rng(7)
    t = T0 + 3_600 * 10**9 + np.cumsum(rng.integers(15_000, 25_000, 2_000)) * 1000
    t[701:] += 3 * 10**9
    w = rng.uniform(100, 900, len(t)).astype(np.float32)
    order = np.arange(len(t))[::-1]  # unsorted on purpose
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")
    c.execute("SET VARIABLE partition_date = ?", [DAY])
    raw = pa.table({
        "date": pa.array([DAY] * len(t), pa.date32()),
        "ts": pa.array(t[order] // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "host": ["h"] * len(t), "gpu": pa.array(np.zeros(len(t), np.uint8)), "source": ["nvml-buffer"] * len(t),
        "power_w": pa.array(w[order]), "power_avg_w": pa.nulls(len(t), pa.float32()),
    })
    c.register("_raw", raw)
    c.execute("CREATE TABLE power AS SELECT * FROM _raw")
    c.register("_rows", pa.Table.from_batches([energy_seconds(t, w, np.ones(len(t), np.uint8), "h", 0)]))
    c.execute("CREATE TABLE energy_curve AS SELECT ?::DATE AS date, host::VARCHAR AS host, * EXCLUDE (host) FROM _rows", [DAY])
    for name in ("power_day.sql", "power_energy.sql"):
        for statement in split((VIEWS / name).read_text()):
            c.execute(statement)
    return c, t, w.astype(np.float64)


def test_energy_and_power_are_the_macros_values(con):
    c, t, w = con
    cv = curve.read_curve(c, "h", 0)
    assert (np.diff(cv.t_ns) > 0).all() and len(cv) == len(t)  # sorted although stored in reverse
    rng = np.random.default_rng(1)
    probe = np.concatenate([
        rng.integers(t[0] - 10**9, t[-1] + 10**9, 150),  # anywhere, before the first and after the last sample too
        t[rng.integers(0, len(t), 30)],  # at sample instants
        t[[0, 699, 700, 701, -1]], [t[700] + 10**9],  # the gap's edges and inside it
    ]).astype(np.int64)
    got_e, got_p = cv.energy_at(probe), cv.power_at(probe)
    for x, ge, gp in zip(probe.tolist(), got_e, got_p, strict=True):
        [(want_e,)] = c.execute("SELECT energy_at_ns('h', 0, ?::BIGINT)", [x]).fetchall()
        assert ge == pytest.approx(want_e, rel=1e-12, abs=1e-9), x
        i = np.searchsorted(t, x, side="right") - 1
        if i < 0 or (x > t[i] and (i + 1 == len(t) or t[i + 1] - t[i] > 2 * 10**9)):
            assert np.isnan(gp), x
        elif x == t[i]:
            assert gp == w[i], x
        else:
            assert gp == w[i] + (w[i + 1] - w[i]) * (x - t[i]) / (t[i + 1] - t[i]), x


def test_peak_inside_is_the_highest_sample(con):
    c, t, _ = con
    cv = curve.read_curve(c, "h", 0)
    rng = np.random.default_rng(2)
    lo = np.sort(rng.integers(t[0] - 10**8, t[-1], 300))
    hi = lo + rng.integers(0, 2 * 10**8, 300)
    got = cv.peak_in(lo, hi)
    for a, b, g in zip(lo, hi, got, strict=True):
        inside = cv.power_w[(cv.t_ns >= a) & (cv.t_ns < b)]
        assert (np.isnan(g) if len(inside) == 0 else g == inside.max())


def test_an_empty_curve_gives_zero_energy(con):
    c, _, _ = con
    empty = curve.read_curve(c, "nobody", 9)
    assert len(empty) == 0
    assert empty.energy_at(np.array([T0, T0 + 1])).tolist() == [0.0, 0.0]
    assert np.isnan(empty.power_at(np.array([T0]))).all() and np.isnan(empty.peak_in(np.array([T0]), np.array([T0 + 5]))).all()
