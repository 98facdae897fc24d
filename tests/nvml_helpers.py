"""Shared helpers for the NVML collector tests: run the real collector on the fake NVML, read back rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.contract import POWER, check_file_schema

REPO = Path(__file__).resolve().parent.parent
FAKE = "tests.fakes.fake_pynvml"


def read_power(data_dir: Path) -> pa.Table:
    """Every visible power file, each checked against the contract, as one table."""
    files = sorted((Path(data_dir) / "power").glob("date=*/host=*/*.parquet"))
    for f in files:
        check_file_schema(f, POWER)
    if not files:
        return POWER.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=POWER) for f in files])


def series(table: pa.Table, gpu: int, source: str) -> list[tuple[int, dict]]:
    rows = [r for r in table.to_pylist() if r["gpu"] == gpu and r["source"] == source]
    return sorted(rows, key=lambda r: r["ts"])


def max_gap_s(rows) -> float:
    t = sorted(pa.array([r["ts"] for r in rows], pa.timestamp("ns", "UTC")).cast(pa.int64()).to_pylist())
    return max((b - a for a, b in zip(t, t[1:], strict=False)), default=0) / 1e9


def collector_process(data_dir: Path, fake: dict, *args: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, WATTLINE_FAKE_NVML=json.dumps(fake), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "collectors.nvml", "--nvml-module", FAKE, "--data-dir", str(data_dir),
           "--host", "testhost", *args]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def power_files(data_dir: Path) -> set[Path]:
    return set((Path(data_dir) / "power").glob("date=*/host=*/*.parquet"))


def wait_for_new_file(data_dir: Path, proc: subprocess.Popen, before=frozenset(), timeout_s: float = 20.0) -> None:
    """Wait until this process has written its first file (one not in ``before``)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if power_files(data_dir) - before:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("collector wrote no file")
