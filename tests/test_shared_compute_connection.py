"""The steps of one run and scope share one compute catalog (views, macros, inventory and
assignment tables built once), each step on a connection of its own: what a step leaves in its
session (temp tables, registered relations, variables, settings) never reaches the next."""

import duckdb
import pyarrow as pa
import pytest

from pipeline import warehouse
from pipeline.resources import WarehouseResource
from pipeline.runner import run_day
from pipeline.scope import Scope
from tests.builders import DAY, write_square_fleet


@pytest.fixture
def builds(monkeypatch):
    """The scopes each compute catalog was built for, in order (scoped ``create_views`` calls: the
    reader catalog's has no scope)."""
    seen: list = []
    create_views = warehouse.create_views

    def counted(con, data_dir, **kw):
        if kw.get("scope") is not None:
            seen.append(kw["scope"])
        return create_views(con, data_dir, **kw)

    monkeypatch.setattr(warehouse, "create_views", counted)
    yield seen
    warehouse.close_shared()


def test_a_runs_steps_build_one_compute_catalog_per_scope(tmp_path, builds):
    data = tmp_path / "data"
    write_square_fleet(data, seconds=30)
    selection = ["power_1s", "power_100ms", "fleet_power_1s", "fleet_power_100ms", "power_summary"]
    outcome = run_day(data, DAY.isoformat(), selection=selection, workers=1)
    assert outcome.success, outcome.error
    steps = len(outcome.step_seconds)
    assert steps >= 5  # the cluster-day's steps and the fleet-day's
    assert [(s.cluster, s.fleet) for s in builds] == [("c0", False), (None, True)], f"{len(builds)} catalogs for {steps} steps"
    # what a later step read through the shared views is what the earlier steps wrote
    summary = warehouse.read_day(data, "power_summary", DAY.isoformat())
    assert summary.num_rows > 0
    assert warehouse._kept is None  # closed at the run's end


def test_a_step_leaves_nothing_in_the_next_steps_session(tmp_path, builds):
    write_square_fleet(tmp_path, seconds=10)
    resource = WarehouseResource(data_dir=str(tmp_path))
    scope = Scope(date=DAY.isoformat(), cluster="c0")
    with resource.connection(scope, share="run-a") as con:
        con.execute("CREATE TEMP TABLE scratch AS SELECT 1 AS x")
        con.execute("SET VARIABLE grid_step_ms = 250")
        con.execute("SET TimeZone = 'Europe/Paris'")
        con.register("_rows", pa.table({"x": [1]}))
        files = con.execute("SELECT getvariable('files_power')").fetchone()[0]
        assignments = con.execute("SELECT count(*) FROM gpu_assignments").fetchone()[0]
    with resource.connection(scope, share="run-a") as con:
        for name in ("scratch", "_rows"):
            with pytest.raises(duckdb.CatalogException):
                con.execute(f"SELECT * FROM {name}").fetchall()
        assert con.execute("SELECT getvariable('grid_step_ms')").fetchone()[0] is None
        assert con.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
        assert con.execute("SELECT getvariable('partition_date')::VARCHAR, getvariable('cluster'), getvariable('scope')").fetchone() == (
            DAY.isoformat(), "c0", "cluster")
        assert con.execute("SELECT getvariable('files_power')").fetchone()[0] == files  # a list of paths, as built
        assert con.execute("SELECT count(*) FROM gpu_assignments").fetchone()[0] == assignments
        with pytest.raises(duckdb.CatalogException):  # a name the catalog lacks is never a Python variable
            con.execute("SELECT * FROM files").fetchall()
    assert len(builds) == 1


def test_another_run_or_a_failed_step_builds_the_catalog_again(tmp_path, builds):
    write_square_fleet(tmp_path, seconds=10)
    resource = WarehouseResource(data_dir=str(tmp_path))
    scope = Scope(date=DAY.isoformat(), cluster="c0")
    with resource.connection(scope, share="run-a"):
        pass
    with resource.connection(scope, share="run-b"):  # another run: the first's catalog is closed
        pass
    assert len(builds) == 2
    with pytest.raises(RuntimeError), resource.connection(scope, share="run-b") as con:
        con.execute("CREATE OR REPLACE VIEW power AS SELECT 1 AS broken")
        raise RuntimeError("the step failed")
    with resource.connection(scope, share="run-b") as con:  # not the failed step's catalog
        assert "broken" not in [d[0] for d in con.execute("DESCRIBE power").fetchall()]
    assert len(builds) == 3
    with resource.connection(scope) as con:  # no run: a connection of its own, as before
        assert con.execute("SELECT getvariable('cluster')").fetchone()[0] == "c0"
    assert len(builds) == 4
