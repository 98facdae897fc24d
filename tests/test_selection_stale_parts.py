"""A day re-run with a selection after the inventory changed: the selected tables' parts of
clusters the day no longer has are deleted (their rows are now in a current cluster's part and
would count twice); the parts of tables not selected are left as they were."""

import duckdb
import yaml

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from tests.builders import DAY, power_table, square_wave, write_square_fleet


def _rows(data_dir, table: str, host: str) -> int:
    glob = data_dir / "derived" / table / "**" / "*.parquet"
    return duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{glob}', union_by_name => true) WHERE host = '{host}'").fetchone()[0]


def _clusters(data_dir, table: str) -> list[str]:
    return sorted(p.name for p in (data_dir / "derived" / table / f"date={DAY.isoformat()}").glob("cluster=*"))


def _assign(data_dir, host: str) -> None:
    """List ``host`` (one GPU) in the inventory's cluster c0."""
    path = data_dir / "inventory.yaml"
    inv = yaml.safe_load(path.read_text())
    inv["fleets"][0]["clusters"][0]["hosts"].append({"name": host, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0}]})
    path.write_text(yaml.safe_dump(inv))


def test_a_selected_rerun_after_a_host_is_assigned_counts_its_rows_once(data_dir):
    write_square_fleet(data_dir, seconds=10)
    t, p = square_wave(10, 1, 100, 200)
    write_dataset(power_table("late-host", 0, t, p), data_dir, "power")
    first = run_day(data_dir, DAY.isoformat(), selection=["power_1s", "power_100ms"], fleet_day=False)
    assert first.success, first.error
    once = _rows(data_dir, "power_1s", "late-host")
    assert once > 0 and _clusters(data_dir, "power_1s") == ["cluster=_unassigned", "cluster=c0"]

    _assign(data_dir, "late-host")
    again = run_day(data_dir, DAY.isoformat(), selection=["power_1s"], fleet_day=False)
    assert again.success, again.error
    assert _clusters(data_dir, "power_1s") == ["cluster=c0"]
    assert _rows(data_dir, "power_1s", "late-host") == once
    # not selected: left as the first run wrote it (c0's part of it does not have the host yet)
    assert _clusters(data_dir, "power_100ms") == ["cluster=_unassigned", "cluster=c0"]
