"""Built days shared by the whole test session: each fleet shape goes through the daily job once
and every test that reads it takes the same data dir, instead of building its own.

A test that only reads a day takes the fixture (``report_day``, ``demo_day``). A test that
writes into a day (reruns it, damages a file, adds a table, serves it to the UI) works on its own
copy: ``copy_of(day, tmp_path / "data")``. A shared day that changes while the session runs fails
the session at its end (``BuiltDay.changed``), naming the files, so a test that forgot to copy is
found rather than silently skewing the tests after it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeline.runner import RunOutcome, run_day
from tests.builders import DAY
from tests.once_per_run import once_per_run

DATE = DAY.isoformat()


@dataclass(frozen=True)
class BuiltDay:
    """A data dir after one daily run of ``date``, the run's outcome, and the folder its report went to."""

    data_dir: Path
    outcome: RunOutcome
    reports_dir: Path
    date: str = DATE
    files: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)

    def tables(self) -> set[str]:
        """The tables the run materialized, by name (a fleet-day asset's key without its ``fleet/``)."""
        return {key.rsplit("/", 1)[-1] for key in self.outcome.materialized}

    def changed(self) -> list[str]:
        """Files of the data dir added, removed or rewritten since the day was built."""
        now = _fingerprint(self.data_dir)
        return sorted(p for p in self.files.keys() | now.keys() if self.files.get(p) != now.get(p))


def _fingerprint(root: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def copy_of(day: BuiltDay, target: Path) -> Path:
    """A private copy of a shared day's data dir (the Dagster instance included), for a test that
    writes: as if the day had been built there (its catalog is rebuilt for the new path, so no
    reader notes that it was built elsewhere)."""
    from pipeline import warehouse

    shutil.copytree(day.data_dir, target)
    warehouse.publish(target)
    return target


def build(root: Path, write, date: str = DATE, selection: list[str] | None = None) -> BuiltDay:
    """``write(data_dir)`` then one daily run of ``date`` (of ``selection`` only, when given), its
    report written under ``root/reports`` (never the session's shared report folder, which every
    other run of the same date overwrites)."""
    data_dir, reports_dir = root / "data", root / "reports"
    write(data_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATTLINE_REPORTS_DIR", str(reports_dir))
        outcome = run_day(data_dir, date, selection=selection)
    assert outcome.success, outcome.error
    return BuiltDay(data_dir, outcome, reports_dir, date=date, files=_fingerprint(data_dir))


def builds_a_day(fixture_function):
    """Says that a fixture builds a day of its own through the daily job (tens of seconds on a
    busy 2-core machine): every test that takes it, directly or through another fixture, is
    marked ``slow`` (tests/conftest.py), so ``make test-fast`` leaves it to ``make test``. Put it
    under ``@pytest.fixture``. A fixture that could read a shared day instead should. The shared
    days of real captures below say it too: ``make test`` builds each once, the inner loop none."""
    fixture_function.builds_a_day = True
    return fixture_function


def slow_setup(fixture_function):
    """Says that a fixture, or the tests that read it, take more than ~10 s without building a day
    (a real Prometheus that scrapes its series in real time, a live collector whose scripted
    signals the tests watch for seconds): as with ``builds_a_day``, every test that takes it is
    marked ``slow``. Put it under ``@pytest.fixture``."""
    fixture_function.slow_setup = True
    return fixture_function


def takes_a_slow_fixture(item) -> bool:
    """Whether a collected test takes, anywhere in its fixture closure, a fixture marked
    ``builds_a_day`` or ``slow_setup``."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(getattr(fd.func, "builds_a_day", False) or getattr(fd.func, "slow_setup", False)
               for name in info.names_closure for fd in info.name2fixturedefs.get(name, ()))


def _unchanged(day: BuiltDay):
    yield day
    changed = day.changed()
    assert not changed, f"a test wrote into the shared day {day.data_dir} (copy it with tests.days.copy_of): {changed[:10]}"


@pytest.fixture(scope="session")
def report_day(tmp_path_factory) -> BuiltDay:
    """Ten minutes of the square-wave fleet (``tests.builders.write_square_fleet``) plus one request
    every 5 s on ep-a (``tests.report_fixtures.write_day``): the power tests, the report and the UI
    read it. Its power tables are those of the fleet alone (the requests change no power row); the
    requests, which the flat inference power does not follow, make phase_timeline's clock_skew WARN."""
    from tests.report_fixtures import write_day

    yield from _unchanged(once_per_run(tmp_path_factory, "report-day", lambda root: build(root, write_day)))


# The real captures' days, each read by tests of several files. Their runs select the union of
# what those tests read (a whole day would add the tables none of them reads).
CAPTURE_4_TABLES = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "swing_stats",
                    "phase_timeline", "phase_intervals", "phase_segments", "request_energy", "energy_per_token",
                    "power_cap_whatif"]
CAPTURE_2_TABLES = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments",
                    "request_energy", "energy_per_token"]


@pytest.fixture(scope="session")
@builds_a_day
def capture_4_day(tmp_path_factory) -> BuiltDay:
    """h200-capture-4 (tests/data/h200-capture-4): the collector's own files of one H200, its
    inventory entry and its 368 logged requests (``write_capture_4``), on 2026-12-03."""
    from tests.test_phases_event_time_real import write_capture_4

    yield from _unchanged(once_per_run(tmp_path_factory, "capture-4-day", lambda root: build(root, write_capture_4, "2026-12-03", CAPTURE_4_TABLES)))


@pytest.fixture(scope="session")
@builds_a_day
def capture_2_day(tmp_path_factory) -> BuiltDay:
    """The H200 capture 2's inference phase (tests/data/phases/h200-capture-2: driver buffer at
    ~20 ms, 59 logged requests, ``tests.phase_real.write_h200_capture``), on 2026-12-02."""
    from tests.phase_real import write_h200_capture

    yield from _unchanged(once_per_run(tmp_path_factory, "capture-2-day", lambda root: build(root, write_h200_capture, "2026-12-02", CAPTURE_2_TABLES)))


TINY_DATE = "2026-11-30"
TINY_COLLECTOR_HOURS = 0.1


def write_tiny_collector(data_dir: Path) -> None:
    """The simulated tiny fleet's first 6 minutes (seed 0) as ``wattline collect`` writes them."""
    import datetime as dt

    from collectors.simulate import simulate

    simulate(data_dir, start=dt.date.fromisoformat(TINY_DATE), fleet="tiny", hours=TINY_COLLECTOR_HOURS, seed=0, shape="collector")


@pytest.fixture(scope="session")
@builds_a_day
def tiny_collector_day(tmp_path_factory) -> BuiltDay:
    """The simulated tiny fleet's first 6 minutes of 2026-11-30 in the collector's shape (the
    driver's ~20 ms buffer and 100 ms field rows, ``write_tiny_collector``), every table built:
    the phase and collector-shape tests read it."""
    yield from _unchanged(once_per_run(tmp_path_factory, "tiny-collector-day", lambda root: build(root, write_tiny_collector, TINY_DATE)))



# The simulated demo fleet's first 6 minutes (seed 0, one 10 Hz series per GPU): the power tables the
# plausibility tests read and the phase tables the prefill-peak test reads.
DEMO_FLEET_HOURS = 0.1
DEMO_FLEET_TABLES = ["power_1s", "fleet_power_1s", "power_100ms", "fleet_power_100ms", "swing_stats", "power_summary",
                     "training_vs_inference", "coincidence", "training_energy", "energy_curve", "phase_intervals", "phase_segments"]


def write_demo_fleet(data_dir: Path) -> None:
    import datetime as dt

    from collectors.simulate import simulate

    simulate(data_dir, start=dt.date.fromisoformat(TINY_DATE), fleet="demo", hours=DEMO_FLEET_HOURS, seed=0)


@pytest.fixture(scope="session")
@builds_a_day
def demo_fleet_day(tmp_path_factory) -> BuiltDay:
    """The simulated demo fleet (2 training hosts, 4 inference hosts of 8 H200s) for the first 6
    minutes of 2026-11-30, its US endpoints' peak (``write_demo_fleet``): ``DEMO_FLEET_TABLES`` only."""
    yield from _unchanged(once_per_run(tmp_path_factory, "demo-fleet-day",
                                       lambda root: build(root, write_demo_fleet, TINY_DATE, DEMO_FLEET_TABLES)))

__all__ = ["BuiltDay", "build", "builds_a_day", "capture_2_day", "capture_4_day", "copy_of", "demo_fleet_day", "once_per_run", "report_day",
           "slow_setup", "takes_a_slow_fixture", "tiny_collector_day"]
