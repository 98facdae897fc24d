"""The shared built days' guards (tests/days.py): a shared day that a test writes into is found, and
a test that takes a fixture building a day of its own is `slow` (left out of `make test-fast`)."""

import os

import pytest

from pipeline.runner import RunOutcome
from tests.days import BuiltDay, _fingerprint, builds_a_day, slow_setup


def _day(tmp_path) -> BuiltDay:
    d = tmp_path / "data"
    (d / "derived" / "power_1s").mkdir(parents=True)
    (d / "derived" / "power_1s" / "part-0.parquet").write_bytes(b"rows")
    return BuiltDay(d, RunOutcome(date="2026-11-30", success=True, run_id="r"), tmp_path / "reports", files=_fingerprint(d))


def test_an_untouched_day_is_unchanged(tmp_path):
    assert _day(tmp_path).changed() == []


def test_a_rewritten_added_or_removed_file_is_named(tmp_path):
    day = _day(tmp_path)
    part = day.data_dir / "derived" / "power_1s" / "part-0.parquet"
    part.write_bytes(b"other")
    os.utime(part, ns=(1, 1))  # even a rewrite of the same size within the clock's tick
    (day.data_dir / ".dagster").mkdir()
    (day.data_dir / ".dagster" / "runs.db").write_bytes(b"")
    assert day.changed() == [".dagster/runs.db", "derived/power_1s/part-0.parquet"]
    part.unlink()
    assert day.changed() == [".dagster/runs.db", "derived/power_1s/part-0.parquet"]


@pytest.fixture
@builds_a_day
def _own_day():
    return "a day"


@pytest.fixture
def _through_another(_own_day):
    return _own_day


def test_a_test_taking_a_day_building_fixture_is_slow(request, _through_another):
    assert request.node.get_closest_marker("slow") is not None


@pytest.fixture
@slow_setup
def _slow_server():
    return "a server"


def test_a_test_taking_a_slow_setup_fixture_is_slow(request, _slow_server):
    assert request.node.get_closest_marker("slow") is not None


def test_a_test_without_one_is_not(request):
    assert request.node.get_closest_marker("slow") is None


@pytest.mark.slow  # a real pytest collection of three test files (imports the whole pipeline)
def test_tests_reading_a_capture_day_are_slow_also_when_they_take_it_by_name():
    """The capture days are built through the daily job: the inner loop (`-m "not slow"`) keeps none
    of the tests that read them, those that choose the day by a parameter (getfixturevalue) included."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                           "tests/test_phases_event_time_real.py", "tests/test_power_swings_native.py", "tests/test_phases_real.py"],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = [line for line in done.stdout.splitlines() if "::" in line]
    # What stays in the inner loop reads no capture day: the brute-force kernel check on synthetic rows.
    assert kept == ["tests/test_power_swings_native.py::test_kernel_equals_brute_force_per_gpu_and_run"], kept



SHARED_TEST = """
import os, time
import pytest
from tests.once_per_run import once_per_run

def _make(root):
    with open(os.environ["MADE_LOG"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    time.sleep(1)  # long enough for the other worker to ask meanwhile
    (root / "day.txt").write_text("built")
    return root

@pytest.fixture(scope="session")
def day(tmp_path_factory):
    return once_per_run(tmp_path_factory, "a-day", _make)

def test_reads_the_day(day):
    with open(os.environ["ASKED_LOG"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + " " + str(day) + "\\n")
    assert (day / "day.txt").read_text() == "built"
"""


@pytest.mark.slow  # a real pytest run under xdist: a controller and two workers
def test_under_xdist_a_shared_day_is_built_once_for_all_workers(tmp_path):
    """``once_per_run``: with ``-n 2 --dist each`` both workers take the session fixture; the first
    builds under the lock, the other waits and gets the same day, so ``-n 2`` pays for it once."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    made, asked = tmp_path / "made.log", tmp_path / "asked.log"
    (tmp_path / "test_shared.py").write_text(SHARED_TEST)
    env = dict(os.environ, PYTHONPATH=str(repo), MADE_LOG=str(made), ASKED_LOG=str(asked))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "each",
                           "--rootdir", str(tmp_path), "-c", os.devnull, "--basetemp", str(tmp_path / "base"), str(tmp_path / "test_shared.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = asked.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["gw0", "gw1"], lines  # both workers took the fixture
    assert len({line.split()[1] for line in lines}) == 1, lines  # and got the same day
    assert made.read_text().splitlines() in (["gw0"], ["gw1"]), made.read_text()  # which one of them built
