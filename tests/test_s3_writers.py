"""Writers on an s3:// data dir (a real moto server, tests/s3_server.py) give what they give locally."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.simulate import simulate
from collectors.storage import DataRoot

START = dt.date(2026, 11, 30)


def _local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_tiny_simulation_on_s3_matches_the_local_one(s3, tmp_path):
    url = s3.url("fleet/raw")
    local = simulate(tmp_path / "local", start=START, seed=5, fleet="tiny", hours=0.02)
    remote = simulate(url, start=START, seed=5, fleet="tiny", hours=0.02)
    assert remote.line() == local.line() and remote.power_rows > 0 and remote.requests > 0
    assert all(str(f).startswith(url + "/") for f in remote.files)

    expected = _local_files(tmp_path / "local")
    root = DataRoot.open(url)
    assert s3.keys("fleet/raw/") == [f"fleet/raw/{k}" for k in expected]  # the same keys, nothing else
    for key, data in expected.items():
        assert root.read_bytes(key) == data, key  # byte-identical, so the same rows
    for dataset in ("power", "requests", "job_events"):
        pattern = f"{dataset}/date=*/host=*/*.parquet" if dataset == "power" else f"{dataset}/date=*/*.parquet"
        keys = root.list(pattern)
        assert keys == DataRoot.open(tmp_path / "local").list(pattern)
        rows = root.read_parquet(keys)
        assert rows.num_rows and rows.equals(pa.concat_tables(pq.read_table(tmp_path / "local" / k) for k in keys))
