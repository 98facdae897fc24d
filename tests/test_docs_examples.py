"""docs/data-contract.md's "Writing these files yourself" examples run and write valid files.

The code blocks are taken from the document itself (so the docs cannot rot), run in an empty
folder (Python blocks in a child interpreter, SQL blocks through DuckDB), and their output is
judged by `wattline check`: every file must be used as is.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

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
