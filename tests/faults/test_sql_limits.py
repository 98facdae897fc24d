"""Issue 21, item 6: `wattline sql` prints values as they are (no Rich markup), stops a query
past `--timeout`, runs under the pipeline's memory bound, and answers Ctrl-C with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psutil
import pytest

from collectors.settings import load
from pipeline import warehouse
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error

WATTLINE = Path(sys.executable).with_name("wattline")
ENDLESS = "select count(*) from range(1e12::bigint)"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql") / "data"
    write_square_fleet(root, seconds=1)
    warehouse.publish(root)
    return root


def test_table_output_is_plain_text(data_dir):
    """Today: 'GPU [h200] ok' prints as 'GPU  ok', a list cast to text prints blank, '[/x]' raises
    MarkupError. Must: every value and column name printed as it is."""
    query = ("select 'GPU [h200] ok' as a, list_value(1, 2)::varchar as b, '[/x]' as c, "
             "'[bold red]loud[/]' as \"[i]name\", '\\[escaped]' as e")
    result = invoke("sql", query, "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()[:2]
    assert header.split() == ["a", "b", "c", "[i]name", "e"]
    for value in ("GPU [h200] ok", "[1, 2]", "[/x]", "[bold red]loud[/]", "\\[escaped]"):
        assert value in row, result.output


def test_query_past_the_timeout_is_stopped(data_dir):
    """Today: runs until killed. Must: stopped after --timeout, one line, exit 2, in about that time."""
    started = time.monotonic()
    one_line_error(invoke("sql", ENDLESS, "--timeout", "1", "--data-dir", str(data_dir)), "query exceeded 1 s")
    assert time.monotonic() - started < 10
    ok = invoke("sql", "select count(*) as n from range(1000)", "--timeout", "1", "--format", "csv", "--data-dir", str(data_dir))
    assert ok.exit_code == 0 and ok.output.splitlines() == ['"n"', "1000"]


def test_default_timeout_is_documented():
    result = invoke("sql", "--help")
    assert "--timeout SECONDS" in result.output and "60" in result.output


def test_memory_bound_is_the_pipelines(data_dir, monkeypatch):
    """Today: DuckDB's default (80 % of RAM). Must: the pipeline's bound (warehouse.duckdb_config),
    compared with what DuckDB itself reports for that setting."""
    for value in ("300MB", None):
        if value:
            monkeypatch.setenv("WATTLINE_DUCKDB_MEMORY", value)
        else:
            monkeypatch.delenv("WATTLINE_DUCKDB_MEMORY", raising=False)
        expected_setting = warehouse.duckdb_config(load().duckdb_memory)["memory_limit"]  # the setting, as the CLI resolves it
        reference = duckdb.connect(config={"memory_limit": expected_setting})
        expected = reference.execute("select current_setting('memory_limit')").fetchone()[0]
        reference.close()
        result = invoke("sql", "select current_setting('memory_limit') as m", "--format", "csv", "--data-dir", str(data_dir))
        assert result.exit_code == 0 and result.output.splitlines()[1] == f'"{expected}"', (result.output, expected)


def _has_open(pid: int, name: str) -> bool:
    """``pid`` or one of its children (the query runs in a worker process) has ``name`` open."""
    try:
        pids = [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        pids = [pid]
    for each in pids:
        fd_dir = Path(f"/proc/{each}/fd")
        try:
            fds = list(fd_dir.iterdir()) if fd_dir.exists() else []
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd).endswith(name):
                    return True
            except OSError:
                continue
    return False


@pytest.mark.slow  # a real `wattline sql` process interrupted a second into its query
def test_ctrl_c_during_a_query_is_one_line(data_dir):
    """Fault: SIGINT while a long query runs (what Ctrl-C sends). Today: a KeyboardInterrupt
    traceback. Must: the query stopped at once, one line `error: interrupted ...`, exit 130."""
    proc = subprocess.Popen([str(WATTLINE), "sql", ENDLESS, "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _has_open(proc.pid, "warehouse.duckdb"):  # the catalog is open: the query starts now
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(1.0)
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130, err
    assert err.strip() == "error: interrupted (Ctrl-C): the query was stopped" and out == "", err
