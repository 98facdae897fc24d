"""What a run asks of the data dir again and again, answered from memory while it has not changed.

The catalog's publish after each part asks which raw datasets have files and which links sit in
their way (a walk of every day's folders), and every compute connection, file check and cluster
filter reads the inventory. Both are remembered with what they were read from, and must change
as soon as that does: a raw file added between two publishes still rebuilds the catalog.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pytest

from collectors.inventory import INVENTORY_FILE
from collectors.parquet_sink import write_dataset
from pipeline import datadir, warehouse
from pipeline.constants import warehouse_path
from pipeline.resources import WarehouseResource
from tests.builders import power_table, square_wave, two_host_inventory
from tests.report_fixtures import write_requests

DATE = "2026-11-30"


def _age(root: Path, seconds: float = 3600) -> None:
    """Date every folder below ``root`` ``seconds`` back, as a data dir written earlier is."""
    then = time.time() - seconds
    for folder, _, _ in os.walk(root):
        os.utime(folder, (then, then))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Two hosts' inventory and a minute of samples on two days, written an hour ago."""
    d = tmp_path / "data"
    two_host_inventory(d)
    t, p = square_wave(60, 4.0, 100.0, 700.0)
    write_dataset(power_table("train-0", 0, t, p), d, "power", prefix="train-0-0")
    write_dataset(power_table("train-0", 0, t - 86_400 * 10**9, p), d, "power", prefix="train-0-0")
    _age(d)
    return d


@pytest.fixture
def scanned(monkeypatch) -> list[str]:
    """The folders listed (``os.scandir``) while the test runs."""
    seen: list[str] = []
    real = os.scandir

    def listing(path="."):
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", listing)
    return seen


def _publish(d: Path, sql: str = f"SELECT DATE '{DATE}' AS date, 'train-0' AS host, 0::UTINYINT AS gpu") -> str:
    resource = WarehouseResource(data_dir=str(d))
    with resource.connection(DATE) as con:
        warehouse.write_partition(con, d, "power_1s", DATE, sql)
    return warehouse.refresh_catalog(d, "power_1s", d / "derived" / "power_1s" / f"date={DATE}" / "part-0.parquet")


def test_the_catalogs_inputs_list_no_raw_folder_again_while_none_changed(data_dir, scanned):
    first = warehouse._catalog_inputs(data_dir)
    assert any("/power" in p for p in scanned)
    scanned.clear()
    assert warehouse._catalog_inputs(data_dir) == first
    assert not [p for p in scanned if any(f"/{name}" in p for name in ("power", "requests", "job_events"))]


def test_a_walk_of_folders_changed_within_the_clock_tick_window_is_not_remembered(tmp_path, scanned):
    d = tmp_path / "data"
    t, p = square_wave(10, 4.0, 100.0, 700.0)
    write_dataset(power_table("train-0", 0, t, p), d, "power", prefix="train-0-0")  # just now
    datadir.dataset_paths(d, "power")
    scanned.clear()
    datadir.dataset_paths(d, "power")
    assert any("host=train-0" in p for p in scanned)  # listed again: a change in the same tick would not show


def test_a_file_added_to_a_remembered_folder_is_found(data_dir):
    files, _ = datadir.dataset_paths(data_dir, "power")
    t, p = square_wave(10, 4.0, 100.0, 700.0)
    write_dataset(power_table("train-0", 1, t, p), data_dir, "power", prefix="train-0-1")
    again, _ = datadir.dataset_paths(data_dir, "power")
    assert len(again) == len(files) + 1


def test_a_link_put_in_place_of_a_remembered_folder_is_found(data_dir, tmp_path):
    assert datadir.dataset_paths(data_dir, "power")[1] == []
    host = next((data_dir / "power").glob("date=*/host=train-0"))
    host.rename(tmp_path / "elsewhere")
    host.symlink_to(tmp_path / "elsewhere")
    files, links = datadir.dataset_paths(data_dir, "power")
    assert links == [host] and all(host not in f.parents for f in files)


def test_a_raw_file_added_between_two_publishes_still_rebuilds_the_catalog(data_dir):
    """The first requests file gives the catalog a new view (it read an empty relation before),
    though every folder the publishes walked before was remembered."""
    _publish(data_dir)
    assert _publish(data_dir) == "kept"
    con = duckdb.connect(str(warehouse_path(data_dir)), read_only=True)
    assert con.execute("SELECT count(*) FROM requests").fetchall() == [(0,)]
    con.close()
    write_requests(data_dir, n=1)
    assert _publish(data_dir) == "rebuilt"
    con = duckdb.connect(str(warehouse_path(data_dir)), read_only=True)
    assert con.execute("SELECT count(*) FROM requests").fetchall() == [(1,)]
    con.close()


def test_the_inventory_is_parsed_once_while_its_bytes_stay_the_same(data_dir, monkeypatch):
    parsed = []
    real = datadir.load_inventory
    monkeypatch.setattr(datadir, "load_inventory", lambda path: parsed.append(path) or real(path))
    first = datadir.load_inventory_if_any(data_dir)
    assert datadir.load_inventory_if_any(data_dir) is first and len(parsed) <= 1
    two_host_inventory(data_dir, gpus_per_host=3)  # rewritten
    assert len(datadir.load_inventory_if_any(data_dir).gpu_rows()) == 6 != len(first.gpu_rows())
    (data_dir / INVENTORY_FILE).unlink()
    assert datadir.load_inventory_if_any(data_dir) is None
