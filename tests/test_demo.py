"""`wattline demo` (what `make demo` calls) as a new user meets it: how long it will take, progress,
commands to paste with the venv's path, and the three things to open at the end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli.demo import wattline_command
from tests.cli_util import invoke, one_line_error


@pytest.mark.slow  # the session's demo day (tests/demo_day.py)
def test_demo_says_how_long_shows_progress_and_ends_with_three_things_to_open(demo_day):
    out = demo_day.output
    lines = out.splitlines()
    assert lines[0].startswith("wattline demo: 2026-11-30, fleet tiny (6 GPUs, 0.25 h)") and "roughly ~" in lines[0], out
    assert "simulated … simulated" not in out and out.count("simulated") == 1, out
    assert any(re.search(r"cluster-day c0: \d+ tables written \(1/1 cluster-days\)", line) for line in lines) or any(
        "table parts written" in line for line in lines), out
    assert "runs " not in out  # no run ids
    wattline = wattline_command()  # the venv's script, relative to the current folder: `.venv/bin/wattline`
    assert Path(wattline).resolve() == (Path(sys.executable).parent / "wattline").resolve()
    opened = lines[lines.index(next(line for line in lines if line.startswith("done in "))) + 1:][:3]
    assert [line.split(":", 1)[0].strip() for line in opened] == ["1. the report", "2. the web UI", "3. the tables"], out
    assert opened[0].rstrip().endswith("2026-11-30.html") and Path(opened[0].split(":", 1)[1].strip()).exists()
    assert f"{wattline} ui --data-dir {demo_day.data_dir}" in opened[1] and "http://127.0.0.1:3000" in opened[1]
    assert f'{wattline} sql --data-dir {demo_day.data_dir} "describe power_1s"' in opened[2]
    pasted = opened[2].split(":", 1)[1].split("   (")[0].strip()  # the command as a user pastes it
    run = subprocess.run(pasted, shell=True, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "meaning" in run.stdout.splitlines()[0], run.stderr


def test_demo_with_an_unknown_fleet_is_one_error_line(tmp_path):
    result = invoke("demo", "--fleet", "no-such-fleet", "--date", "2026-11-30", "--data-dir", str(tmp_path / "data"))
    one_line_error(result, "fleet 'no-such-fleet'", "built-in fleet")
