"""Issue 28, hostile input II: outside text (file and folder names, reasons) printed by the
`wattline` subcommands has its control characters escaped, so a file name cannot forge a line."""

from __future__ import annotations

import shutil

import pytest

from pipeline import warehouse
from tests.builders import DAY, write_square_fleet
from tests.cli_util import invoke

FORGED = "bad\nerror: forged"


def _forged_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: forged")]


@pytest.mark.slow  # runs the daily job (power_1s) on a day of its own
def test_run_prints_a_quarantined_file_name_escaped(tmp_path):
    """Fault: a damaged raw file named `bad<newline>error: forged.parquet`. Before: `run` printed
    its quarantine line and the failed check's description in two lines each, the second starting
    `error: forged`. Must: one line each, the newline written as \\x0a; the file still quarantined."""
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=1)
    host_dir = data_dir / "power" / f"date={DAY}" / "host=train-0"
    (host_dir / f"{FORGED}.parquet").write_bytes(b"not parquet")
    result = invoke("run", "--date", str(DAY), "--select", "power_1s", "--data-dir", str(data_dir))
    assert _forged_lines(result.output) == [], result.output
    quarantined = [line for line in result.output.splitlines() if line.startswith("quarantined power file")]
    assert len(quarantined) == 1 and "bad\\x0aerror: forged.parquet: not a readable Parquet file" in quarantined[0], result.output
    assert (data_dir / "quarantine" / "files" / "power" / f"date={DAY}" / "host=train-0" / f"{FORGED}.parquet").exists()


def test_simulate_and_sql_print_a_data_dir_name_escaped(tmp_path):
    """Fault: a data dir named with a newline. Before: simulate's summary line and sql's note on a
    moved catalog broke in two. Must: one line each."""
    data_dir = tmp_path / FORGED
    result = invoke("simulate", "--days", "1", "--seed", "1", "--fleet", "tiny", "--hours", "0.01",
                    "--start", str(DAY), "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    assert _forged_lines(result.output) == [] and result.output.rstrip().endswith("bad\\x0aerror: forged"), result.output
    warehouse.publish(data_dir)
    moved = tmp_path / f"moved{FORGED}"
    shutil.move(data_dir, moved)  # the catalog names the old folder: sql says so in a note
    result = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(moved))
    assert result.exit_code == 0, result.output
    assert _forged_lines(result.output) == [], result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "bad\\x0aerror: forged" in notes[0], result.output
