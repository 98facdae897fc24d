import os

import pytest

os.environ.setdefault("WATTLINE_DUCKDB_THREADS", "2")
# The daily report is part of every `run_day`: in tests it skips the PNGs (the report tests
# turn them on) and writes under a temporary folder, never into the repo's reports/out.
os.environ.setdefault("WATTLINE_REPORT_PNG", "off")


@pytest.fixture(autouse=True, scope="session")
def _reports_out_dir(tmp_path_factory):
    if "WATTLINE_REPORTS_DIR" not in os.environ:
        os.environ["WATTLINE_REPORTS_DIR"] = str(tmp_path_factory.mktemp("reports-out"))
    yield


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return d


# S3-compatible test server (moto, 127.0.0.1) and a fresh bucket per test: see tests/s3_server.py.
# One small `wattline demo` day per session, for the tests of what a user sees (tests/demo_day.py).
from tests.demo_day import demo_day  # noqa: E402,F401
from tests.s3_server import s3, s3_server  # noqa: E402,F401

# CI (env CI set, as .ci/run does) must run the browser tests: a run in which a collected
# `browser` test was skipped or deselected fails, so they can never pass silently.
_browser = {"collected": 0, "ran": 0}


@pytest.hookimpl(tryfirst=True)  # before `-m` / `-k` deselect anything
def pytest_collection_modifyitems(config, items):
    _browser["collected"] = sum(1 for item in items if item.get_closest_marker("browser") or "/tests/browser/" in item.path.as_posix())


def pytest_runtest_logreport(report):
    if report.when == "call" and "browser" in report.keywords:
        _browser["ran"] += 1


def browser_tests_missing() -> str | None:
    """Why this CI run must fail for its browser tests, or None."""
    if not os.environ.get("CI") or not _browser["collected"] or _browser["ran"] == _browser["collected"]:
        return None
    return f"CI: {_browser['collected'] - _browser['ran']} of {_browser['collected']} browser test(s) did not run (skipped or deselected); CI must run them all"


def pytest_sessionfinish(session, exitstatus):
    why = browser_tests_missing()
    if why:
        session.config.get_terminal_writer().line(f"error: {why}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
