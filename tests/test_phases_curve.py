"""pipeline/phases/curve.py against the SQL macros it replaces in the phase assets (sql/views/energy.sql):
E(t) and P(t) at many instants by a sorted search must be the macros' doubles, and the peak inside
[lo, hi) the highest sample there (brute force)."""

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pytest

from pipeline.phases import curve
from pipeline.sqlfiles import split

DAY = dt.date(2026, 12, 3)
T0 = int(dt.datetime(2026, 12, 3, tzinfo=dt.UTC).timestamp()) * 10**9
ENERGY_SQL = Path(__file__).resolve().parent.parent / "sql" / "views" / "energy.sql"


@pytest.fixture(scope="module")
def con():
    """A curve of 2,000 samples ~20 ms apart with jitter, a 3 s gap after sample 700 and one at the end,
    written the way energy_curve is (trapezoid running sum, next sample NULL across a gap)."""
    rng = np.random.default_rng(7)
    t = T0 + 3_600 * 10**9 + np.cumsum(rng.integers(15_000_000, 25_000_000, 2_000))
    t[701:] += 3 * 10**9
    w = rng.uniform(100, 900, len(t)).astype(np.float32).astype(np.float64)
    nxt = np.append(t[1:], 0)
    has = np.append(np.diff(t) <= 2 * 10**9, False)
    seg = np.where(has, (w + np.append(w[1:], 0)) / 2 * (nxt - t) / 1e9, 0.0)
    e = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")
    c.execute("SET VARIABLE partition_date = ?", [DAY])
    c.execute("CREATE TABLE energy_curve (date DATE, host VARCHAR, gpu UTINYINT, t_ns BIGINT, power_w FLOAT, energy_j DOUBLE, "
              "next_t_ns BIGINT, next_w FLOAT, source VARCHAR, is_average BOOLEAN)")
    rows = [(DAY, "h", 0, int(t[i]), float(w[i]), float(e[i]), int(nxt[i]) if has[i] else None, float(w[i + 1]) if has[i] else None,
             "nvml-buffer", False) for i in range(len(t))]
    c.executemany("INSERT INTO energy_curve VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows[::-1])  # unsorted on purpose
    for statement in split(ENERGY_SQL.read_text()):
        c.execute(statement)
    return c, t


def test_energy_and_power_are_the_macros_doubles(con):
    c, t = con
    cv = curve.read_curve(c, "h", 0)
    assert (np.diff(cv.t_ns) > 0).all()  # sorted although stored in reverse
    rng = np.random.default_rng(1)
    probe = np.concatenate([
        rng.integers(t[0] - 10**9, t[-1] + 10**9, 400),  # anywhere, before the first and after the last sample too
        t[rng.integers(0, len(t), 50)],  # at sample instants
        t[[0, 699, 700, 701, -1]], [t[700] + 10**9],  # the gap's edges and inside it
    ]).astype(np.int64)
    got_e, got_p = cv.energy_at(probe), cv.power_at(probe)
    for x, ge, gp in zip(probe.tolist(), got_e, got_p, strict=True):
        [(want_e,)] = c.execute("SELECT energy_at_ns('h', 0, ?::BIGINT)", [x]).fetchall()
        assert ge == want_e, x  # the same arithmetic: identical doubles
        want_p = c.execute(
            """SELECT CASE WHEN next_t_ns IS NOT NULL AND $x > t_ns THEN power_w::DOUBLE + (next_w::DOUBLE - power_w::DOUBLE) * ($x - t_ns) / (next_t_ns - t_ns)
                           WHEN $x = t_ns THEN power_w END
               FROM energy_curve WHERE t_ns <= $x ORDER BY t_ns DESC LIMIT 1""", {"x": x}).fetchall()
        want_p = want_p[0][0] if want_p else None
        assert (np.isnan(gp) if want_p is None else gp == want_p), x


def test_peak_inside_is_the_highest_sample(con):
    c, t = con
    cv = curve.read_curve(c, "h", 0)
    rng = np.random.default_rng(2)
    lo = np.sort(rng.integers(t[0] - 10**8, t[-1], 300))
    hi = lo + rng.integers(0, 2 * 10**8, 300)
    got = cv.peak_in(lo, hi)
    for a, b, g in zip(lo, hi, got, strict=True):
        inside = cv.power_w[(cv.t_ns >= a) & (cv.t_ns < b)]
        assert (np.isnan(g) if len(inside) == 0 else g == inside.max())


def test_an_empty_curve_gives_zero_energy(con):
    c, _ = con
    empty = curve.read_curve(c, "nobody", 9)
    assert len(empty) == 0
    assert empty.energy_at(np.array([T0, T0 + 1])).tolist() == [0.0, 0.0]
    assert np.isnan(empty.power_at(np.array([T0]))).all() and np.isnan(empty.peak_in(np.array([T0]), np.array([T0 + 5]))).all()
