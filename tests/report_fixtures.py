"""Data dirs for the report tests: the square-wave fleet with requests (built once per session as
``report_day``, tests/days.py), and copies of it with every analytics table or only the foundation's."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.parquet_sink import write_dataset
from tests.builders import DAY, day_start_ns, write_square_fleet
from tests.report_tables import write_analytics_tables

DATE = DAY.isoformat()
HOSTS = ["train-0", "infer-0"]
GPUS = [("infer-0", 0), ("infer-0", 1)]


def write_requests(data_dir: Path, n: int = 120, endpoint: str = "ep-a") -> None:
    """One request every 5 s: 1 s prefill, 3 s decode."""
    arrival = day_start_ns() + (np.arange(n) * 5e9).astype("int64")

    def ts(a):
        return pa.array(a, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))

    table = pa.table({
        "request_id": [f"r{i}" for i in range(n)], "endpoint": [endpoint] * n, "arrival_ts": ts(arrival),
        "prefill_start_ts": ts(arrival), "first_token_ts": ts(arrival + 10**9), "end_ts": ts(arrival + 4 * 10**9),
        "prompt_tokens": pa.array([1000] * n, pa.int32()), "output_tokens": pa.array([150] * n, pa.int32()), "status": ["ok"] * n,
    })
    write_dataset(table, data_dir, "requests", prefix="test")


def write_day(data_dir: Path) -> None:
    """Ten minutes of the square-wave fleet plus one request every 5 s on ep-a."""
    write_square_fleet(data_dir, seconds=600)
    write_requests(data_dir)


def with_all_tables(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    write_analytics_tables(target, DATE, hosts=HOSTS, clusters=["c0"], endpoints=["ep-a", "ep-b"], gpus=GPUS)
    return target


FOUNDATION_TABLES = {"power_1s", "fleet_power_1s"}


def foundation_only(source: Path, target: Path) -> Path:
    """A copy of ``source`` whose only derived tables are the foundation's: the report as it is
    before the analytics tables land (whether or not their assets exist in this checkout)."""
    from pipeline import warehouse

    shutil.copytree(source, target)
    for folder in (target / "derived").iterdir():
        if folder.name not in FOUNDATION_TABLES:
            shutil.rmtree(folder)
    warehouse.publish(target)
    return target
