"""Constructed inputs with known answers, written through the real contract and writers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.contract import POWER
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.tables import statements

DAY = dt.date(2026, 11, 30)


def day_start_ns(day: dt.date = DAY) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 10**9


def power_table(host: str, gpu: int, t_ns: np.ndarray, power_w: np.ndarray, source: str = "nvml-field") -> pa.Table:
    n = len(t_ns)
    cols = {
        "ts": pa.array(t_ns.astype("int64"), pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
        "host": pa.array([host] * n, pa.string()),
        "gpu": pa.array(np.full(n, gpu, dtype=np.uint8)),
        "gpu_uuid": pa.array([f"GPU-{host}-{gpu}"] * n, pa.string()),
        "power_w": pa.array(power_w.astype(np.float32)),
        "source": pa.array([source] * n, pa.string()).dictionary_encode(),
    }
    for field in POWER:
        if field.name not in cols:
            cols[field.name] = pa.nulls(n, field.type)
    return pa.table(cols).select(POWER.names).cast(POWER)


def square_wave(seconds: float, period_s: float, low_w: float, high_w: float, step_s: float = 0.1, start_ns: int | None = None):
    """Samples every ``step_s`` of a wave that is ``high_w`` for the first half of each period."""
    n = int(round(seconds / step_s))
    t_s = np.arange(n) * step_s
    p = np.where((t_s % period_s) < period_s / 2, high_w, low_w)
    t_ns = (start_ns if start_ns is not None else day_start_ns()) + np.round(t_s * 1e9).astype(np.int64)
    return t_ns, p


def two_host_inventory(data_dir: Path, gpus_per_host: int = 2, tdp_w: float = 700.0) -> None:
    inv = {
        "fleets": [
            {
                "name": "test",
                "clusters": [
                    {
                        "name": "c0",
                        "provisioned_w": 4000,
                        "hosts": [
                            {
                                "name": "train-0",
                                "role": "training",
                                "provisioned_w": 1500,
                                "gpus": [{"index": i, "tdp_w": tdp_w} for i in range(gpus_per_host)],
                                "jobs": [{"name": "job-a", "gpus": list(range(gpus_per_host))}],
                            },
                            {
                                "name": "infer-0",
                                "role": "inference",
                                "gpus": [{"index": i, "tdp_w": tdp_w} for i in range(gpus_per_host)],
                                "endpoints": [{"name": "ep-a", "gpus": list(range(gpus_per_host))}],
                            },
                        ],
                    }
                ],
            }
        ]
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")


def write_square_fleet(data_dir: Path, seconds: float = 600, period_s: float = 4.0) -> None:
    """train-0: GPUs square-wave 100↔700 W (period 4 s); infer-0: constant 200 W. 10 Hz."""
    two_host_inventory(data_dir)
    for host, (low, high) in {"train-0": (100.0, 700.0), "infer-0": (200.0, 200.0)}.items():
        for gpu in range(2):
            t, p = square_wave(seconds, period_s, low, high)
            write_dataset(power_table(host, gpu, t, p), data_dir, "power", prefix=f"{host}-{gpu}")


def definition_query(con, name: str) -> str:
    """A derived table's SQL file run as the DuckDB CLI would (``name`` as pipeline.tables.statements
    takes it, ``<table>/<table>``): its preparatory statements executed on ``con``,
    its final query returned, for a test to hold a kernel's rows against the definition."""
    prepare, query = statements(name)
    for statement in prepare:
        con.execute(statement)
    return query
