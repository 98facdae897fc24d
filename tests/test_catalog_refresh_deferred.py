"""A run brings the catalog up to date once for its parts, not once per table: a fresh day's run
copied and rewrote the catalog for each table's first part."""

import duckdb

from pipeline import warehouse
from pipeline.runner import run_day
from tests.builders import DAY, write_square_fleet

SELECTION = ["power_1s", "power_100ms", "fleet_power_1s", "fleet_power_100ms", "power_summary"]


def test_a_run_refreshes_the_catalog_once_for_all_its_new_tables(tmp_path, monkeypatch):
    data = tmp_path / "data"
    write_square_fleet(data, seconds=30)
    swaps: list[str] = []
    swap_in = warehouse._swap_in

    def counted(data_dir, build):
        swaps.append(str(data_dir))
        return swap_in(data_dir, build)

    monkeypatch.setattr(warehouse, "_swap_in", counted)
    outcome = run_day(data, DAY.isoformat(), selection=SELECTION, workers=1)
    assert outcome.success, outcome.error
    # the cluster-day's new tables at its end, the fleet-day's at its end (or before its report)
    assert len(swaps) <= 2, f"{len(swaps)} catalog copies for {len(outcome.materialized)} parts"
    con = duckdb.connect(str(warehouse.warehouse_path(data)), read_only=True)
    try:
        views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert set(SELECTION) <= views  # every table the run wrote is in the catalog after it
    assert warehouse.refresh_catalog(data) == "kept"


def test_outside_a_run_a_part_refreshes_the_catalog_at_once(tmp_path):
    data = tmp_path / "data"
    write_square_fleet(data, seconds=10)
    run_day(data, DAY.isoformat(), selection=["power_1s"], workers=1, fleet_day=False)
    part = next((data / "derived" / "power_1s").rglob("part-0.parquet"))
    assert warehouse.publish_part_to_catalog(data, "power_1s", part) == "kept"
    with warehouse.catalog_refresh_deferred():
        assert warehouse.publish_part_to_catalog(data, "power_1s", part) == "deferred"
