"""The registered series tables: power_1s, power_100ms and energy_curve, each a schema and a
function over one GPU's samples (numpy kernels of pipeline/kernels.py and pipeline/series/energy.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline import kernels
from pipeline.series.energy import ENERGY_SCHEMA, energy_seconds
from pipeline.series.samples import GpuSamples
from pipeline.series.table import SeriesTable

_NAME = pa.dictionary(pa.int32(), pa.string())
_TS = pa.timestamp("us", tz="UTC")


def _host(s: GpuSamples, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([s.host]))


def _gpu(s: GpuSamples, n: int) -> pa.Array:
    return pa.array(np.full(n, s.gpu, np.uint8))


def _source(s: GpuSamples, first: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(s.source_id[first].astype(np.int32), pa.array(s.sources, pa.string()))


POWER_1S_SCHEMA = pa.schema([
    ("host", _NAME), ("gpu", pa.uint8()), ("ts", _TS),
    ("mean_w", pa.float32()), ("min_w", pa.float32()), ("max_w", pa.float32()), ("energy_j", pa.float64()),
    ("samples", pa.int32()), ("gap_before", pa.bool_()), ("duplicate_samples", pa.int32()),
    ("source", _NAME), ("is_average", pa.bool_()),
])


def power_1s_rows(s: GpuSamples) -> pa.RecordBatch:
    """Per second: mean, min, max power, trapezoid energy, samples, gap flag (kernels.seconds_1s)."""
    c = kernels.seconds_1s(s.t_ns, s.power_w, s.source_rank, s.is_average, s.best)
    n = len(c["second"])
    return pa.record_batch({
        "host": _host(s, n),
        "gpu": _gpu(s, n),
        "ts": pa.array(c["second"] * 1_000_000, pa.int64()).cast(_TS),
        "mean_w": c["mean_w"].astype(np.float32),
        "min_w": c["min_w"],
        "max_w": c["max_w"],
        "energy_j": c["energy_j"],
        "samples": c["samples"].astype(np.int32),
        "gap_before": c["gap_before"],
        "duplicate_samples": c["duplicate_samples"].astype(np.int32),
        "source": _source(s, c["first"]),
        "is_average": c["is_average"],
    }, schema=POWER_1S_SCHEMA)


POWER_100MS_SCHEMA = pa.schema([
    ("host", _NAME), ("gpu", pa.uint8()), ("ts", _TS),
    ("power_w", pa.float32()), ("samples", pa.int32()), ("source", _NAME),
    ("power_avg_w", pa.float32()), ("is_average", pa.bool_()),
])


def power_100ms_rows(s: GpuSamples) -> pa.RecordBatch:
    """Per 100 ms slot: mean best-source power, samples, 1 s average (kernels.grid_100ms)."""
    c = kernels.grid_100ms(s.t_ns, s.power_w, s.power_avg_w, s.has_avg, s.source_rank, s.is_average, s.best)
    n = len(c["slot"])
    return pa.record_batch({
        "host": _host(s, n),
        "gpu": _gpu(s, n),
        "ts": pa.array(c["slot"] * (kernels.SLOT_NS // 1000), pa.int64()).cast(_TS),
        "power_w": c["power_w"].astype(np.float32),
        "samples": c["samples"].astype(np.int32),
        "source": _source(s, c["first"]),
        "power_avg_w": pa.array(c["power_avg_w"].astype(np.float32), mask=c["avg_null"]),
        "is_average": c["is_average"],
    }, schema=POWER_100MS_SCHEMA)


ENERGY_CURVE_SCHEMA = ENERGY_SCHEMA


def energy_curve_rows(s: GpuSamples) -> pa.RecordBatch:
    """Per GPU-second: cumulative energy and power at its start and end (energy.energy_seconds)."""
    return energy_seconds(s.t_ns, s.power_w, s.source_rank, s.host, s.gpu, curve=s.curve)


POWER_1S = SeriesTable(
    "power_1s", POWER_1S_SCHEMA, power_1s_rows,
    # means and energies take nearly as many values as rows: split streams, not a dictionary
    # (simulated tiny fleet, 2 h: 0.73 -> 0.58 MB with the engine's large pages)
    parquet_options=(
        ("use_dictionary", [f.name for f in POWER_1S_SCHEMA if f.name not in ("ts", "mean_w", "energy_j")] + ["date"]),
        ("column_encoding", {"ts": "DELTA_BINARY_PACKED", "mean_w": "BYTE_STREAM_SPLIT", "energy_j": "BYTE_STREAM_SPLIT"}),
    ),
)
POWER_100MS = SeriesTable(
    "power_100ms", POWER_100MS_SCHEMA, power_100ms_rows,
    # measured on a collector-shaped tiny-fleet hour: 1.95 MB, 2.12 MB with dictionaries for every column
    parquet_options=(
        ("use_dictionary", ["date", "host", "gpu", "samples", "source", "is_average"]),
        ("column_encoding", {"ts": "DELTA_BINARY_PACKED", "power_w": "BYTE_STREAM_SPLIT", "power_avg_w": "BYTE_STREAM_SPLIT"}),
    ),
)
ENERGY_CURVE = SeriesTable(
    "energy_curve", ENERGY_CURVE_SCHEMA, energy_curve_rows,
    # one row per GPU-second: delta-packed instants, split-stream energies and powers
    # (simulated tiny fleet, 2 h: 1.43 -> 1.35 MB with the engine's large pages)
    parquet_options=(
        ("use_dictionary", ["date", "host", "gpu", "samples", "source_rank"]),
        ("column_encoding", {"t_ns": "DELTA_BINARY_PACKED", "first_t_ns": "DELTA_BINARY_PACKED", "last_t_ns": "DELTA_BINARY_PACKED",
                             "energy_j": "BYTE_STREAM_SPLIT", "end_energy_j": "BYTE_STREAM_SPLIT",
                             "power_w": "BYTE_STREAM_SPLIT", "end_power_w": "BYTE_STREAM_SPLIT"}),
    ),
)

SERIES_TABLES: tuple[SeriesTable, ...] = (POWER_1S, POWER_100MS, ENERGY_CURVE)
"""Every series table, in the order the engine computes them."""


def series_table(name: str) -> SeriesTable:
    return next(t for t in SERIES_TABLES if t.name == name)
