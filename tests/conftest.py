import os
import sys
from pathlib import Path

import pytest

# Where the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE, python -B), each
# pytest worker would rewrite every test module's asserts and every Python the tests start would
# compile the project, again on every run (about 6 s of CPU per worker before its first test).
# The session writes them under build/pycache (gitignored) instead: the source tree stays as
# clean as the setting keeps it, and the processes the tests start inherit the same.
if sys.dont_write_bytecode:
    PYCACHE = Path(__file__).resolve().parents[1] / "build" / "pycache"
    sys.pycache_prefix, sys.dont_write_bytecode = str(PYCACHE), False
    os.environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
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
from tests.days import capture_2_day, capture_4_day, demo_fleet_day, report_day, tiny_collector_day  # noqa: E402,F401
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
    from tests.days import takes_a_slow_fixture

    for item in items:
        if takes_a_slow_fixture(item):
            item.add_marker(pytest.mark.slow)


# pytest-xdist's --dist loadfile hands out whole files, by default the files with the most tests
# first: the long files of a few tests (a day built and checked in one or two) came last, and one
# worker ran them while the other had finished. Here the files that hold a `slow` test come first,
# the rest after them (each group in collection order, each file's tests in theirs), and the
# scheduler keeps that order; the UI's first-start tests, which wait for the quiet time of a UI
# started at collection, stay in the second group.
@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)  # after every marker is set
def pytest_collection_modifyitems_long_files_first(items):
    long_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in long_files)  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


# `make test-fast` skips the `slow` tests; one that takes longer than this without the marker is
# named at the end of the run, so the inner loop stays short as tests are added (wall seconds: on a
# busy 2-core machine a test of ~5 s of its own takes about this long).
SLOW_S = 10.0
_unmarked_slow: list[tuple[str, str, float]] = []
# A shared day (tests/once_per_run.py) is built in the setup of the first test that takes it:
# those seconds are the session's, not that test's, and are left out of its setup here.
SHARED_DAY_S = "shared_day_build_s"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    from tests import once_per_run

    before = once_per_run.seconds[0]
    yield
    if once_per_run.seconds[0] > before:
        # user_properties travel with the setup report, to the xdist controller too
        item.user_properties.append((SHARED_DAY_S, once_per_run.seconds[0] - before))


def pytest_runtest_logreport(report):
    # Under pytest-xdist every report also reaches the controller, which prints the summary.
    if report.when not in ("setup", "call") or "slow" in report.keywords or "browser" in report.keywords:
        return
    own_s = report.duration - sum(s for key, s in report.user_properties if key == SHARED_DAY_S and report.when == "setup")
    if own_s > SLOW_S:
        _unmarked_slow.append((report.nodeid, report.when, own_s))


def pytest_terminal_summary(terminalreporter):
    if _unmarked_slow:
        terminalreporter.section(f"over {SLOW_S:.0f} s without @pytest.mark.slow (make test-fast runs them)")
        for nodeid, when, seconds in sorted(_unmarked_slow, key=lambda x: -x[2]):
            # A long setup is a fixture's: every test that takes it must be marked, or the fixture shared.
            terminalreporter.write_line(f"{seconds:7.1f}s {when:<5} {nodeid}")
