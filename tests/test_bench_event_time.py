"""bench.event_time's training variant and byte counts: the benchmark's two data shapes must be valid
inventories over the same raw files, and derived bytes must be counted per table."""

from __future__ import annotations

import os

from bench.event_time import as_training, disk_bytes, write_data
from collectors.inventory import load_inventory


def test_training_variant_shares_the_power_files_and_is_one_training_host(tmp_path):
    src, dst = tmp_path / "inference", tmp_path / "training"
    rows = write_data(src, gpus=8, hours=0.001)
    assert rows > 0 and (src / "requests").exists()
    as_training(src, dst)
    host = load_inventory(dst / "inventory.yaml").fleets[0].clusters[0].hosts[0]
    assert host.role == "training" and not host.endpoints
    assert [sorted(j.gpus) for j in host.jobs] == [list(range(8))]
    assert not (dst / "requests").exists()
    files = sorted(p.relative_to(src / "power") for p in (src / "power").rglob("*.parquet"))
    assert files and files == sorted(p.relative_to(dst / "power") for p in (dst / "power").rglob("*.parquet"))
    assert all(os.path.samefile(src / "power" / f, dst / "power" / f) for f in files)  # hard links: no second copy


def test_disk_bytes_counts_raw_and_each_derived_table(tmp_path):
    (tmp_path / "power" / "date=x").mkdir(parents=True)
    (tmp_path / "power" / "date=x" / "a.parquet").write_bytes(b"x" * 100)
    for table, n in (("power_1s", 7), ("energy_curve", 30)):
        (tmp_path / "derived" / table / "date=x").mkdir(parents=True)
        (tmp_path / "derived" / table / "date=x" / "part.parquet").write_bytes(b"y" * n)
    assert disk_bytes(tmp_path) == {"power": 100, "derived": 37, "derived_by_table": {"energy_curve": 30, "power_1s": 7}}
    assert disk_bytes(tmp_path / "none") == {"power": 0, "derived": 0, "derived_by_table": {}}
