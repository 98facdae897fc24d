"""The phase checks' queries (pipeline/phases/checks.py) on small tables: which GPU clock_skew reads
per endpoint, and what the agreement check fetches per GPU."""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.phases import checks

DAY = dt.date(2026, 11, 30)


def _con(**tables: pa.Table) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET VARIABLE partition_date = ?", [DAY])
    for name, table in tables.items():
        con.register(name, table)
    return con


def test_clock_skew_reads_each_logged_endpoints_first_gpu():
    """Per endpoint with a request label, its first GPU in (host, gpu) order among the rows that have
    one, whatever order the rows come in; an endpoint without labels (phase NULL) is not read."""
    rows = [  # endpoint, host, gpu, phase
        ("ep-b", "h2", 0, "idle"), ("ep-a", "h1", 3, "decode"), ("ep-a", "h0", 7, None),
        ("ep-a", "h1", 2, "prefill"), ("ep-b", "h10", 1, "idle"), ("ep-c", "h0", 0, None),
        ("ep-a", "h1", 2, "idle"), ("ep-b", "h2", 0, "decode"),
    ]
    timeline = pa.table({
        "date": [DAY] * len(rows), "endpoint": [r[0] for r in rows], "host": [r[1] for r in rows],
        "gpu": pa.array([r[2] for r in rows], pa.uint8()), "phase": [r[3] for r in rows],
    })
    got = _con(phase_timeline=timeline).execute(checks.SKEW_GPUS_SQL).fetchall()
    assert got == [("ep-a", "h1", 2), ("ep-b", "h10", 1)]  # 'h10' < 'h2': code-point order, as VARCHAR sorts


def test_agreement_fetches_numbers_only():
    """agreement_rows' per-GPU query returns the segments' kind and bounds as numeric arrays, in
    start order: no string column (fetchnumpy makes a Python object per row of one)."""
    t0 = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    s = dt.timedelta(seconds=1)
    rows = [  # source, phase, start s, end s
        ("requests", "prefill", 5, 6), ("power", "prefill", 1, 2), ("requests", "decode", 6, 9),
        ("power", "decode", 2, 3), ("requests", "idle", 9, 10),
    ]
    segments = pa.table({
        "date": [DAY] * len(rows), "endpoint": ["ep"] * len(rows), "host": ["h"] * len(rows),
        "gpu": pa.array([0] * len(rows), pa.uint8()), "source": [r[0] for r in rows], "phase": [r[1] for r in rows],
        "start_ts": pa.array([t0 + r[2] * s for r in rows], pa.timestamp("us", tz="UTC")),
        "end_ts": pa.array([t0 + r[3] * s for r in rows], pa.timestamp("us", tz="UTC")),
    })
    got = _con(phase_segments=segments).sql(checks.PREFILL_SEGMENTS_SQL, params={"endpoint": "ep", "host": "h", "gpu": 0}).fetchnumpy()
    assert all(np.asarray(v).dtype != object for v in got.values())
    assert list(np.asarray(got["req"])) == [False, True, True] and list(np.asarray(got["pre"])) == [True, True, False]
    base = int(t0.timestamp()) * 10**9
    assert list(np.asarray(got["a"]) - base) == [10**9, 5 * 10**9, 6 * 10**9]
