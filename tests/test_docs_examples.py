"""docs/data-contract.md's "Writing these files yourself" examples run and write valid files.

The code blocks are taken from the document itself (so the docs cannot rot), run in an empty
folder (Python blocks in a child interpreter, SQL blocks through DuckDB), and their output is
judged by `wattline check`: every file must be used as is.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.cli_util import invoke

DOC = Path(__file__).resolve().parents[1] / "docs" / "data-contract.md"


def examples() -> list[tuple[str, str]]:
    """(language, code) of each fenced block in the section."""
    text = DOC.read_text()
    section = text.split("### Writing these files yourself", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(python|sql)\n(.*?)```", section, flags=re.S)


def test_the_section_has_a_pyarrow_a_polars_and_a_duckdb_example_of_five_lines_or_so():
    blocks = examples()
    assert [lang for lang, _ in blocks] == ["python", "python", "sql"]
    assert "pyarrow" in blocks[0][1] and "polars" in blocks[1][1] and "COPY" in blocks[2][1]
    assert all(len(code.strip().splitlines()) <= 6 for _, code in blocks)


def test_the_examples_write_files_that_wattline_check_accepts(tmp_path):
    hosts = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    for host in hosts:
        (tmp_path / "power" / "date=2026-11-30" / f"host={host}").mkdir(parents=True)
    for lang, code in examples():
        if lang == "python":
            run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
        else:
            con = duckdb.connect()
            con.execute(code.replace("TO 'power/", f"TO '{tmp_path}/power/"))
    files = sorted((tmp_path / "power").rglob("*.parquet"))
    assert [f.parent.name for f in files] == [f"host={h}" for h in hosts]
    for f in files:
        table = pq.read_table(f)
        assert table.num_rows == 60 and table["ts"][0].as_py().isoformat() == "2026-11-30T00:00:00+00:00", f
    result = invoke("check", str(tmp_path / "power"))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("ok", "casts", "quarantine"))]
    assert len(lines) == 3 and all(line.startswith("ok ") for line in lines), result.output


# Every shell command of README.md and docs/*.md runs, against a small demo data dir (tests/demo_day.py),
# unless the block is marked with what it needs: `<!-- needs: gpu|cluster|install -->` (a GPU host, a
# fleet's services such as Prometheus, vLLM or object storage, or a fresh clone's install), or
# `<!-- server: ... -->` (each line starts a server: it must start and keep running).
ROOT = Path(__file__).resolve().parents[1]
NEEDS = {"gpu", "cluster", "install"}
SERVER_SETTLE_S = 20.0


def shell_blocks() -> list[tuple[str, int, str | None, str]]:
    """(file, line, marker, code) of each fenced sh/bash block; marker: the HTML comment before it."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = doc.read_text().split("\n")
        i = 0
        while i < len(lines):
            if re.fullmatch(r"```(sh|bash|shell|console)\s*", lines[i]):
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                before = lines[i - 1].strip() if i else ""
                marker = before if before.startswith("<!--") else None
                out.append((doc.relative_to(ROOT).as_posix(), i + 1, marker, "\n".join(lines[i + 1:end])))
                i = end
            i += 1
    return out


def test_every_shell_block_is_runnable_here_or_says_what_it_needs():
    blocks = shell_blocks()
    assert len(blocks) >= 8
    for doc, line, marker, _ in blocks:
        if marker and marker.startswith("<!-- needs:"):
            reason = marker.removeprefix("<!-- needs:").split()[0]
            assert reason in NEEDS, f"{doc}:{line}: needs {reason!r}: one of {sorted(NEEDS)}"
        else:
            assert marker is None or marker.startswith("<!-- server:"), f"{doc}:{line}: unknown marker {marker}"


def _workspace(tmp_path: Path, demo_day) -> Path:
    """A folder like a checkout after `make demo`: `.venv/bin/wattline` and `./data`."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "data").symlink_to(demo_day.data_dir)
    return tmp_path


def _servers_keep_running(where: str, commands: list[str], root: Path, demo_day) -> int:
    """Starts every command at once, each in a workspace of its own (a copy of the demo's data
    dir: a server writes its Dagster instance there), and holds that each is still running
    ``SERVER_SETTLE_S`` later; then stops them all (Ctrl-C to each one's process group)."""
    from pipeline import warehouse

    servers = []
    try:
        for k, command in enumerate(commands):
            cwd = root / f"{k}"
            cwd.mkdir(parents=True)
            (cwd / ".venv").symlink_to(Path(sys.executable).parent.parent)
            shutil.copytree(demo_day.data_dir, cwd / "data")
            warehouse.publish(cwd / "data")  # the catalog, for its new place
            log = root / f"server-{k}.log"
            with open(log, "wb") as out:
                servers.append((command, log, subprocess.Popen(
                    ["bash", "-c", command], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    env=dict(os.environ, WATTLINE_AUTOMATION="off"))))
        deadline = time.monotonic() + SERVER_SETTLE_S
        while time.monotonic() < deadline:
            for command, log, proc in servers:
                if proc.poll() is not None:
                    raise AssertionError(f"{where}: {command!r} exited with {proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    finally:
        for _, _, proc in servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for _, _, proc in servers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return len(servers)


@pytest.mark.slow
def test_every_runnable_shell_command_in_the_docs_runs(tmp_path, demo_day):
    cwd = _workspace(tmp_path, demo_day)
    ran = 0
    for doc, line, marker, code in shell_blocks():
        if marker and marker.startswith("<!-- needs:"):
            continue
        code = code.replace("/tmp/r ", f"{tmp_path}/r ")
        if marker:  # servers: each line must start and keep running; stopped here
            ran += _servers_keep_running(f"{doc}:{line}", [c for c in code.splitlines() if c.strip()], tmp_path / f"servers-{ran}", demo_day)
            continue
        run = subprocess.run(["bash", "-e", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{doc}:{line}:\n{code}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        ran += 1
    assert ran >= 4
