"""The CI check that every collected browser test ran (tests/browser_ran.py), held on a small suite
of its own run by a real pytest in a subprocess: with CI set it fails the run when a browser test
is skipped (in its body or its fixture) or deselected, without and with pytest-xdist's ``-n 2``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """
from tests.browser_ran import register


def pytest_configure(config):
    register(config)
"""

INI = """[pytest]
markers =
    browser: drives a browser
addopts = -p no:cacheprovider
"""

BROWSER_TESTS = """
import os

import pytest


@pytest.fixture
def page():
    if os.environ.get("SKIP_IN_FIXTURE"):
        pytest.skip("no browser here")
    return "page"


@pytest.mark.browser
def test_page_renders(page):
    assert page == "page"


@pytest.mark.browser
def test_page_links():
    if os.environ.get("SKIP_IN_BODY"):
        pytest.skip("no browser here")


@pytest.mark.browser
@pytest.mark.parametrize("n", range(4))
def test_many_pages(n):
    assert n < 4


def test_not_a_browser_test():
    assert True
"""


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser-suite")
    (root / "pytest.ini").write_text(INI)
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_pages.py").write_text(BROWSER_TESTS)
    return root


def _run(suite: Path, *args: str, ci: bool = True, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    if ci:
        environ["CI"] = "true"
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=suite, env=environ,
                          capture_output=True, text=True, timeout=120)


def _xdist(n: str) -> list[str]:
    if n == "0":
        return []
    pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra (pyproject.toml)")
    return ["-n", n]


# A run under xdist starts three interpreters (controller and two workers): slow; the same check
# without xdist stays in the inner loop.
WORKERS = pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)], ids=["without-xdist", "xdist-n2"])


@WORKERS
def test_all_browser_tests_ran_passes(suite, workers):
    done = _run(suite, *_xdist(workers))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "did not run" not in done.stdout


@WORKERS
@pytest.mark.parametrize("where", ["SKIP_IN_FIXTURE", "SKIP_IN_BODY"])
def test_a_skipped_browser_test_fails_ci(suite, workers, where):
    done = _run(suite, *_xdist(workers), **{where: "1"})
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "error: CI: 1 of 6 browser test(s) did not run (skipped or deselected)" in done.stdout, done.stdout


@pytest.mark.slow  # two pytest sessions
def test_outside_ci_skipped_browser_tests_pass(suite):
    """A developer may skip or deselect them."""
    for args, env in (([], {"SKIP_IN_BODY": "1"}), (["-m", "not browser"], {})):
        done = _run(suite, *args, ci=False, **env)
        assert done.returncode == 0, done.stdout + done.stderr


@WORKERS
def test_deselected_browser_tests_fail_ci(suite, workers):
    done = _run(suite, *_xdist(workers), "-k", "not many")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "error: CI: 4 of 6 browser test(s) did not run (skipped or deselected)" in done.stdout, done.stdout
