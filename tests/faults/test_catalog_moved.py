"""Issue 21 items 2 and 3: a moved or copied data dir, a catalog whose files went away, and a
report section that fails for another reason than a table not built yet.

The catalog (`warehouse.duckdb`) records the data dir it was built for; readers (`sql`,
`report`) never write it: they use it when it serves this data dir and otherwise build the same
views in memory. The next writer rebuilds it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipeline import warehouse
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error
from tests.report_fixtures import DATE, GPUS, HOSTS, write_requests
from tests.report_tables import write_analytics_tables


def counts(data_dir):
    result = invoke("sql", "select (select count(*) from power) as p, (select count(*) from requests) as r, "
                    "(select count(*) from power_summary) as s", "--format", "csv", "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@pytest.fixture
def built(tmp_path):
    """A data dir with raw data, analytics tables and a published catalog."""
    data = tmp_path / "data"
    write_square_fleet(data, seconds=10)  # 4 GPUs x 100 samples
    write_requests(data)
    write_analytics_tables(data, DATE, hosts=HOSTS, clusters=["c0"], endpoints=["ep-a", "ep-b"], gpus=GPUS)  # publishes
    assert (data / "warehouse.duckdb").is_file()
    return data


def test_moved_data_dir(built, tmp_path):
    """Fault: `mv data moved`. `sql` failed with a permission error on the old path. Must survive:
    every query answers from the new place, says the catalog was built elsewhere, writes
    nothing; the next writer rebuilds the catalog and the note goes away."""
    expected = counts(built)
    assert expected[-1] == "400,120,6", expected
    catalog = (built / "warehouse.duckdb").read_bytes()
    moved = tmp_path / "moved"
    subprocess.run(["mv", str(built), str(moved)], check=True)
    after = counts(moved)
    assert after[0].startswith("note: ") and f"was built for {built}" in after[0], after
    assert after[1:] == expected
    assert (moved / "warehouse.duckdb").read_bytes() == catalog  # `sql` never writes
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, index, power.draw [W]\n2026/11/30 10:00:00.000, 0, 100.0 W\n")
    imported = invoke("import", "nvidia-smi", str(log), "--host", "train-0", "--tz", "UTC", "--data-dir", str(moved))
    assert imported.exit_code == 0 and "rebuilt warehouse.duckdb" in imported.output, imported.output
    assert warehouse.catalog_problem(moved) is None
    assert counts(moved) == ['"p","r","s"', "401,120,6"]


def test_copied_data_dir_reads_the_copy(built, tmp_path):
    """Fault: `cp -a data copy`, then the original is changed and removed. A catalog with absolute
    paths would read (or fail on) the original. Must survive: the copy reads its own files."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(built), str(copy)], check=True)
    shutil.rmtree(built / "requests")
    assert counts(built)[-1] == "400,0,6"
    shutil.rmtree(built)
    assert counts(copy)[1:] == ['"p","r","s"', "400,120,6"]


def test_query_on_deleted_files_writes_nothing(built):
    """Fault: a dataset's files are deleted after the catalog was built. `sql` rebuilt
    warehouse.duckdb (a write from a read-only command). Must survive: the answer (the dataset
    reads empty), and the catalog file, byte for byte."""
    catalog = (built / "warehouse.duckdb").read_bytes()
    shutil.rmtree(built / "power")
    assert counts(built) == ['"p","r","s"', "0,120,6"]
    assert (built / "warehouse.duckdb").read_bytes() == catalog
    assert sorted(p.name for p in built.iterdir() if p.name.startswith((".tmp", "warehouse"))) == ["warehouse.duckdb"]


def test_missing_catalog_is_not_created_by_sql(built):
    """`sql` on a data dir without a catalog answers from views built in memory and creates none
    (the old behaviour built warehouse.duckdb from a read-only command)."""
    (built / "warehouse.duckdb").unlink()
    assert counts(built) == ['"p","r","s"', "400,120,6"]
    assert not (built / "warehouse.duckdb").exists()


def test_report_after_a_move(built, tmp_path):
    """Fault: the data dir is moved, then `wattline report`: it printed a traceback per section,
    wrote an HTML with 0 charts and exited 0. Must survive: every section that has its table,
    with its charts; no section failed; exit 0."""
    moved = tmp_path / "moved"
    built.rename(moved)
    out = tmp_path / "out"
    result = invoke("report", "--date", DATE, "--no-png", "--out", str(out), "--data-dir", str(moved))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "failed" not in result.output
    summary = json.loads((out / f"{DATE}.json").read_text())
    assert [k for k, s in summary["sections"].items() if s["error"]] == []
    assert len(summary["charts"]) > 0


def test_report_section_failure_exits_non_zero(built, tmp_path):
    """Fault: a derived table's part is damaged (not a table that is not built yet). The report
    exited 0. Must survive: the other sections; the report says which section failed and why,
    one line each, no traceback, and exits 1."""
    part = next((built / "derived" / "power_summary").rglob("*.parquet"))
    part.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    out = tmp_path / "out"
    result = invoke("report", "--date", DATE, "--no-png", "--out", str(out), "--data-dir", str(built))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    failed = [line for line in lines if line.startswith("section ")]
    assert failed and all(" failed: " in line for line in failed), result.output
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "report section(s) failed" in errors[0], result.output
    summary = json.loads((out / f"{DATE}.json").read_text())
    assert {k for k, s in summary["sections"].items() if s["error"]} == {line.split()[1] for line in failed}


def test_report_with_a_broken_inventory_is_one_line(built, tmp_path):
    """With no usable catalog, a report needs a readable inventory to build its views: one line,
    not an HTML of "not available" sections (an existing catalog keeps the inventory it was built
    with, so it still reports)."""
    (built / "inventory.yaml").write_text("fleets: [ {name: x, clusters: [\n")
    (built / "warehouse.duckdb").unlink()
    one_line_error(invoke("report", "--date", DATE, "--no-png", "--out", str(tmp_path / "out"), "--data-dir", str(built)), "inventory.yaml")
