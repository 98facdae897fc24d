"""phase_segments' rows of an endpoint's runs, numbered (endpoint_segment) and shaped in numpy
(pipeline/assets/inference_phases.py: segment_numbers, segment_table_batches), are exactly the rows
of the SQL that did it before (tests/oracles/phase_segments_rows.sql), in the same order: runs of
several GPUs on two hosts that overlap and tie to the microsecond, NULL tokens and energies, a NaN
peak, a GPU without a TDP and one without a sample interval."""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.assets.inference_phases import SEGMENTS_SCHEMA, SEGMENTS_TABLE_SCHEMA, segment_numbers, segment_table_batches
from pipeline.kernels import registered
from tests.oracles import oracle_query

DATE = dt.date(2026, 12, 3)
DAY0 = 1_796_256_000_000_000_000  # 2026-12-03 00:00 UTC (ns)
# gk, endpoint, host, gpu, tdp_w: hosts whose code-point order differs from a case-blind one
GPUS = [(3, "ep", "h-B", 1, 700.0), (4, "ep", "h-B", 0, 700.0), (5, "ep", "h-a", 0, None), (6, "ep", "h-a", 2, 350.0)]
INTERVAL_MS = {3: 20.0, 4: 20.5, 5: None}  # gk 6: no power facts (LEFT JOIN: NULL)


def _runs(seed: int) -> pl.DataFrame:
    """Contiguous runs of random labels per GPU and source, on a coarse µs grid so that runs of
    different GPUs start in the same microsecond (ties the numbering breaks by host and gpu)."""
    rng = np.random.default_rng(seed)
    parts = []
    for gk, *_ in GPUS:
        for src in (0, 1):
            n = int(rng.integers(20, 60))
            lengths = rng.integers(1, 6, n) * 1000 * int(rng.choice([1, 1000]))  # µs multiples: ties across GPUs
            lo = DAY0 + int(rng.integers(0, 5)) * 1000 + np.r_[0, np.cumsum(lengths)[:-1]]
            hi = lo + lengths - rng.integers(0, 999, n) * (rng.random(n) < 0.3)  # some end inside their last µs
            ph = rng.integers(0, 3, n).astype(np.int32)
            ph[1:][ph[1:] == ph[:-1]] = (ph[1:][ph[1:] == ph[:-1]] + 1) % 3  # maximal runs: no two alike in a row
            energy = rng.random(n) * 50
            peak = 300 + rng.random(n) * 600
            if src == 1:
                peak[rng.random(n) < 0.1] = np.nan  # a NaN peak (DuckDB orders it above the TDP)
            parts.append(pl.DataFrame({
                "gk": np.full(n, gk), "src": src, "ph": ph, "lo": lo, "hi": hi,
                "energy_j": np.where(rng.random(n) < 0.1, np.nan, energy) if src == 0 else energy,
                "mean_w": energy / ((hi - lo) / 1e9), "peak_w": peak,
                "prompt_tokens": rng.random(n) * 100 if src == 0 else None,
                "output_tokens": rng.random(n) * 10 if src == 0 else None,
            }, schema=SEGMENTS_SCHEMA, nan_to_null=src == 0))
    return pl.concat(parts).sample(fraction=1.0, shuffle=True, seed=seed)  # any order of runs


def _oracle(runs: pl.DataFrame) -> pa.Table:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET VARIABLE partition_date = ?", [DATE])
    chunk = pl.DataFrame([g for g in GPUS], orient="row", schema={
        "gk": pl.Int64, "endpoint": pl.String, "host": pl.String, "gpu": pl.UInt8, "tdp_w": pl.Float64})
    intervals = pl.DataFrame({"gk": list(INTERVAL_MS), "sample_interval_ms": list(INTERVAL_MS.values())},
                             schema={"gk": pl.Int64, "sample_interval_ms": pl.Float64})
    indexed = runs.with_row_index("i").with_columns(pl.col("i").cast(pl.Int64))
    with registered(con, "_segments", indexed), registered(con, "_phase_gpus", chunk), registered(con, "_power_gpus", intervals):
        query = oracle_query(con, "phase_segments_rows")
        return con.sql(query).to_arrow_table().cast(SEGMENTS_TABLE_SCHEMA)


def _rows(table: pa.Table) -> list[tuple]:
    """The table's rows in order, a NaN as the string "nan" (so that NaN equals NaN)."""
    return [tuple("nan" if isinstance(v, float) and v != v else v for v in r.values()) for r in table.to_pylist()]


def test_segment_rows_equal_their_sql_oracle():
    days = (DATE - dt.date(1970, 1, 1)).days
    for seed in range(4):
        runs = _runs(seed)
        got = pa.Table.from_batches(list(segment_table_batches(runs, GPUS, INTERVAL_MS, days)), schema=SEGMENTS_TABLE_SCHEMA)
        want = _oracle(runs)
        assert got.num_rows == runs.height
        assert got.schema == want.schema
        assert _rows(got) == _rows(want), seed
        assert got["above_tdp"].to_pylist().count(True) > 0


def test_segment_numbers_join_overlapping_runs_of_the_endpoint():
    """Two GPUs' prefills that overlap are one endpoint-level run; one that starts at the other's
    end (to the µs) starts the next."""
    gpus = [(1, "ep", "h", 0, 700.0), (2, "ep", "h", 1, 700.0)]
    us = 1000
    runs = pl.DataFrame({
        "gk": [1, 2, 1, 2], "src": [0, 0, 0, 0], "ph": [2, 2, 2, 2],
        "lo": [DAY0, DAY0 + 5 * us, DAY0 + 20 * us, DAY0 + 20 * us + 999], "hi": [DAY0 + 10 * us, DAY0 + 20 * us + 500, DAY0 + 30 * us, DAY0 + 31 * us],
        "energy_j": 1.0, "mean_w": 1.0, "peak_w": 1.0, "prompt_tokens": None, "output_tokens": None,
    }, schema=SEGMENTS_SCHEMA)
    assert segment_numbers(runs, gpus).tolist() == [1, 1, 2, 2]
