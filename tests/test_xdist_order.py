"""The order the test files are handed to pytest-xdist's workers (tests/xdist_order.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.xdist_order import longest_first

ROOT = Path(__file__).resolve().parents[1]


class _Item:
    def __init__(self, nodeid: str, *markers: str):
        self.nodeid, self.markers = nodeid, set(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None


def test_files_with_browser_and_slow_tests_go_first_each_file_whole_and_in_its_order():
    items = [
        _Item("tests/test_a.py::one"), _Item("tests/test_a.py::two"), _Item("tests/test_a.py::three"),
        _Item("tests/test_b.py::slow_one", "slow"), _Item("tests/test_b.py::quick"),
        _Item("tests/browser/test_c.py::page", "browser"),
        _Item("tests/test_d.py::slow_one", "slow"), _Item("tests/test_d.py::slow_two", "slow"),
        _Item("tests/test_e.py::quick"),
    ]
    ordered = [i.nodeid for i in longest_first(items)]
    assert ordered == [
        "tests/browser/test_c.py::page",  # a browser test weighs as two slow ones; a tie keeps the collected order
        "tests/test_d.py::slow_one", "tests/test_d.py::slow_two",
        "tests/test_b.py::slow_one", "tests/test_b.py::quick",
        "tests/test_a.py::one", "tests/test_a.py::two", "tests/test_a.py::three",
        "tests/test_e.py::quick",
    ]


def test_under_xdist_the_file_with_the_slow_test_starts_first(tmp_path):
    """With the Makefile's XDIST options the workers get the file with the slow test first, though
    it has the fewest tests and is collected last."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        from tests import xdist_order

        def pytest_configure(config):
            config.addinivalue_line("markers", "slow: slow")
            xdist_order.register(config)
    """))
    for name, n in (("test_many", 6), ("test_some", 4)):
        (tmp_path / f"{name}.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(n)))
    # collected last, and xdist's own order would hand it out last too
    (tmp_path / "test_z_long.py").write_text("import pytest\n\n@pytest.mark.slow\ndef test_long():\n    pass\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile", "--no-loadscope-reorder",
         "-v", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    started = [line.split("::")[0].split()[-1] for line in run.stdout.splitlines() if "PASSED" in line]
    assert started[0] == "test_z_long.py", run.stdout


def test_the_makefile_hands_files_out_in_collection_order():
    """`make test` passes --no-loadscope-reorder, without which xdist sorts the files by their
    number of tests and the order above is lost."""
    makefile = (ROOT / "Makefile").read_text()
    [line] = [line for line in makefile.splitlines() if line.startswith("XDIST :=")]
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line
