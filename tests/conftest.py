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
# Days built once per session and read by every test that needs them; a test that writes copies
# one first (tests/days.py, CONTRIBUTING.md "Tests that read a built day").
from tests.days import capture_2_day, capture_4_day, report_day, square_day  # noqa: E402,F401
from tests.demo_day import demo_day  # noqa: E402,F401
from tests.s3_server import s3, s3_server  # noqa: E402,F401


# CI (env CI set, as .ci/run does) must run the browser tests: a run in which a collected
# `browser` test was skipped or deselected fails, so they can never pass silently, with or
# without pytest-xdist's -n (tests/browser_ran.py).
def pytest_configure(config):
    from tests.browser_ran import register

    register(config)


@pytest.hookimpl(tryfirst=True)  # before `-m` / `-k` deselect anything
def pytest_collection_modifyitems(config, items):
    from tests.days import takes_a_day_of_its_own

    for item in items:
        if takes_a_day_of_its_own(item):
            item.add_marker(pytest.mark.slow)


# `make test-fast` skips the `slow` tests; one that takes longer than this without the marker is
# named at the end of the run, so the inner loop stays short as tests are added.
SLOW_S = 20.0
_unmarked_slow: list[tuple[str, str, float]] = []


def pytest_runtest_logreport(report):
    # Under pytest-xdist every report also reaches the controller, which prints the summary.
    if report.when in ("setup", "call") and report.duration > SLOW_S and "slow" not in report.keywords and "browser" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.when, report.duration))


def pytest_terminal_summary(terminalreporter):
    if _unmarked_slow:
        terminalreporter.section(f"over {SLOW_S:.0f} s without @pytest.mark.slow (make test-fast runs them)")
        for nodeid, when, seconds in sorted(_unmarked_slow, key=lambda x: -x[2]):
            # A long setup is a fixture's: every test that takes it must be marked, or the fixture shared.
            terminalreporter.write_line(f"{seconds:7.1f}s {when:<5} {nodeid}")
