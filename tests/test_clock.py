"""The wall clock is read for days in one place (collectors/days.py), so every "today" of the code
can be pinned by a test (tests/clock.py), and a command reads it once, so its default day and the
range it checks that day against agree at midnight UTC."""

import datetime as dt
import re
from pathlib import Path

import pytest

from collectors.days import today_utc
from tests.cli_util import invoke
from tests.clock import before_midnight, midnight_after, pin

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK = re.compile(r"\b(?:datetime\.(?:now|utcnow|today)|date\.today)\b")
ONE_PLACE = "collectors/days.py"


def test_the_code_reads_the_wall_clock_for_days_in_one_place():
    """A ``datetime.now()`` elsewhere in pipeline/ or collectors/ is a "today" no test can pin: a
    test that reads the day and asserts what that code decided fails when midnight falls between."""
    found = [f"{path.relative_to(ROOT)}:{n}" for package in ("pipeline", "collectors")
             for path in sorted((ROOT / package).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if WALL_CLOCK.search(line)]
    assert [where for where in found if not where.startswith(ONE_PLACE + ":")] == []
    assert any(where.startswith(ONE_PLACE + ":") for where in found)


def test_pinning_the_clock_pins_every_import_of_it(monkeypatch):
    day = dt.date(2026, 11, 30)
    pin(monkeypatch, before_midnight(day))
    assert today_utc() == day  # imported by name before the pin
    pin(monkeypatch, midnight_after(day))
    assert today_utc() == day + dt.timedelta(days=1)


@pytest.mark.parametrize("instant, first", [(before_midnight(dt.date(2026, 11, 30)), "2026-11-29"),
                                            (midnight_after(dt.date(2026, 11, 30)), "2026-11-30")],
                         ids=["23:59:59.9", "00:00:00"])
def test_simulates_default_day_is_yesterday_at_midnight_too(tmp_path, monkeypatch, instant, first):
    pin(monkeypatch, instant)
    result = invoke("simulate", "--fleet", "tiny", "--hours", "0.01", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "d" / "power").iterdir()] == [f"date={first}"]
