"""Issue 5, item 8: `wattline ui`, `sql` (and `run`) on a data dir that is missing, empty, or
whose data was deleted after the catalog was built → one clear line, never a traceback."""

from __future__ import annotations

import shutil

import pytest

from pipeline import warehouse
from pipeline.cli import ui
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error
from tests.faults.inject import write_requests_and_job_events


@pytest.fixture
def execve(monkeypatch):
    """Stands in for `dagster dev`: records what `wattline ui` would exec."""
    calls = []
    monkeypatch.setattr(ui.os, "execve", lambda path, args, env: calls.append((args, env)))
    return calls


def test_missing_data_dir(tmp_path, execve):
    """Fault: --data-dir names nothing. Must survive: the user's understanding (one line, exit 2)."""
    missing = tmp_path / "nope"
    one_line_error(invoke("run", "--date", "2026-11-30", "--data-dir", str(missing)), "does not exist")
    one_line_error(invoke("sql", "select 1", "--data-dir", str(missing)), "does not exist")
    one_line_error(invoke("ui", "--data-dir", str(missing)), "does not exist")
    assert execve == [] and not missing.exists()


def test_empty_data_dir(tmp_path, execve):
    """Fault: the data dir exists but holds no Parquet (only an inventory). `sql` and `run` say
    so in one line; the UI starts (there is nothing to materialize yet) after saying so."""
    write_square_fleet(tmp_path, seconds=1)
    shutil.rmtree(tmp_path / "power")
    one_line_error(invoke("run", "--date", "2026-11-30", "--data-dir", str(tmp_path)), "no power, requests or job_events Parquet for 2026-11-30")
    one_line_error(invoke("sql", "select 1", "--data-dir", str(tmp_path)), "has no Parquet data yet")
    result = invoke("ui", "--data-dir", str(tmp_path))
    assert result.exit_code == 0 and "has no Parquet yet" in result.output and "Traceback" not in result.output
    assert len(execve) == 1


def test_data_deleted_after_the_catalog_was_built(tmp_path):
    """Fault: a dataset's files are deleted after warehouse.duckdb was built (its view's glob now
    matches nothing). Must survive: queries (the catalog is rebuilt once and the query retried;
    the dataset reads as empty); with no data left at all, one clear line."""
    write_square_fleet(tmp_path, seconds=1)
    write_requests_and_job_events(tmp_path)
    warehouse.publish(tmp_path)
    shutil.rmtree(tmp_path / "power")
    ok = invoke("sql", "select (select count(*) from power) as p, (select count(*) from requests) as r", "--format", "csv", "--data-dir", str(tmp_path))
    assert ok.exit_code == 0 and ok.output.splitlines() == ['"p","r"', "0,2"], ok.output
    shutil.rmtree(tmp_path / "requests")
    shutil.rmtree(tmp_path / "job_events")
    one_line_error(invoke("sql", "select count(*) from requests", "--data-dir", str(tmp_path)), "has no Parquet data yet")


def test_damaged_catalog_is_rebuilt(tmp_path):
    """Fault: warehouse.duckdb is not a DuckDB file (a bad copy, a disk error). It holds only
    views and inventory tables, so `sql` answers from the same views built in memory (and says
    so) instead of failing, and writes nothing: the next writer rebuilds the file."""
    write_square_fleet(tmp_path, seconds=1)
    damaged = b"not a database" * 1000
    warehouse.publish(tmp_path).write_bytes(damaged)
    ok = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(tmp_path))
    lines = ok.output.splitlines()
    assert ok.exit_code == 0 and lines[1:] == ['"n"', "40"], ok.output
    assert lines[0].startswith("note: ") and "not a catalog" in lines[0]
    assert (tmp_path / "warehouse.duckdb").read_bytes() == damaged  # a reader never writes


def test_broken_inventory_is_one_line(tmp_path):
    """Fault: inventory.yaml is cut short (a bad edit). Nothing sound can be computed without it;
    must survive: the user's understanding: `run` and `sql` say which file and why, in one line."""
    write_square_fleet(tmp_path, seconds=1)
    (tmp_path / "inventory.yaml").write_text("fleets: [ {name: x, clusters: [\n")
    one_line_error(invoke("run", "--date", "2026-11-30", "--data-dir", str(tmp_path)), "inventory.yaml: not valid YAML")
    one_line_error(invoke("sql", "select 1", "--data-dir", str(tmp_path)), "inventory.yaml: not valid YAML")
