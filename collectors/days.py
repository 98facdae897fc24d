"""The days the pipeline can run: one range, shared by the writers (which refuse other days) and
the pipeline's daily partitions (``pipeline/partitions.py``).

It lives in ``collectors/`` (the core layer) so writers can check a day without importing the
pipeline. The pipeline's partitions start at :data:`FIRST_DAY` and end today (UTC: Dagster's
``end_offset=1`` adds the day in progress). Writers accept :data:`FUTURE_SLACK_DAYS` more: a row
stamped just after midnight by a clock running a little fast is kept, and its day can be run
once it has begun; anything later (a year 2200 timestamp, a simulated 2031) is refused or
quarantined with this range in the reason, instead of failing ``wattline run`` afterwards.
"""

from __future__ import annotations

import datetime as dt
import functools

FIRST_DAY = "2020-01-01"
"""First day of the daily partitions (earlier data cannot be materialized)."""
FUTURE_SLACK_DAYS = 1
"""Days after today (UTC) that writers still accept (a fast clock near midnight)."""
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_clock = functools.partial(dt.datetime.now, dt.UTC)
"""The wall clock for days, read in this one place: every "today" of the writers, the partitions,
the sensor, the CLI's default days and the quarantines' day of ingestion comes from
:func:`now_utc`, so a test runs them as at any instant (23:59:59.9 or 00:00:00 UTC) by replacing
this one attribute, however the functions were imported (tests/clock.py)."""


def now_utc() -> dt.datetime:
    return _clock()


def today_utc() -> dt.date:
    return now_utc().date()


def last_runnable_day(today: dt.date | None = None) -> dt.date:
    """The newest day with a partition: today (UTC). Functions that take ``today`` read the clock
    when it is None; a caller that checks several things against one day passes the day it read once."""
    return today or today_utc()


def last_writable_day(today: dt.date | None = None) -> dt.date:
    return (today or today_utc()) + dt.timedelta(days=FUTURE_SLACK_DAYS)


def runnable_range(today: dt.date | None = None) -> str:
    return f"{FIRST_DAY}..{last_runnable_day(today).isoformat()} (UTC)"


def writable_range(today: dt.date | None = None) -> str:
    return f"{FIRST_DAY}..{last_writable_day(today).isoformat()} (UTC)"


def _as_date(day: dt.date | str) -> dt.date:
    return day if isinstance(day, dt.date) else dt.date.fromisoformat(day)


def run_day_problem(day: dt.date | str, today: dt.date | None = None) -> str | None:
    """Why ``day`` has no partition to run, or None."""
    d, today = _as_date(day), today or today_utc()
    if dt.date.fromisoformat(FIRST_DAY) <= d <= last_runnable_day(today):
        return None
    return f"day {d.isoformat()} is outside the days the pipeline can run ({runnable_range(today)})"


def write_day_problem(day: dt.date | str, today: dt.date | None = None) -> str | None:
    """Why a writer must not store data for ``day``, or None."""
    d, today = _as_date(day), today or today_utc()
    if dt.date.fromisoformat(FIRST_DAY) <= d <= last_writable_day(today):
        return None
    return f"day {d.isoformat()} is outside the days the pipeline can run ({writable_range(today)})"


def writable_ns_bounds(today: dt.date | None = None) -> tuple[int, int]:
    """[first, end) in epoch ns of the days writers accept (the same range as :func:`write_day_problem`)."""
    epoch = EPOCH.date()
    first = (dt.date.fromisoformat(FIRST_DAY) - epoch).days * 86_400 * 10**9
    end = (last_writable_day(today) + dt.timedelta(days=1) - epoch).days * 86_400 * 10**9
    return first, end
