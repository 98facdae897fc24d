"""Running the code as at a chosen instant, for the hazards of the clock: a test that reads "today"
and asserts what the code decided a moment later fails when midnight UTC falls in between.

Our code reads the wall clock for its days in one place, ``collectors.days.now_utc`` (the writers'
range, the partitions, the sensor's "today is skipped", the CLI's default days, the quarantine's
day of ingestion); :func:`pin` replaces the clock under it, so a test chooses the instant instead of the clock
choosing it. Functions that take the day as a value are given it directly."""

from __future__ import annotations

import datetime as dt


def before_midnight(day: dt.date) -> dt.datetime:
    """The last tenth of a second of ``day`` (UTC): 23:59:59.9."""
    return dt.datetime.combine(day, dt.time(23, 59, 59, 900_000), dt.UTC)


def midnight_after(day: dt.date) -> dt.datetime:
    """00:00:00 UTC of the day after ``day``."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC)


def schedule_hour_after(day: dt.date, hour: int = 1) -> dt.datetime:
    """When the daily schedule fires on the day after ``day``: ``hour``:15 UTC (the default hour: 1)."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(hour, 15), dt.UTC)


def pin(monkeypatch, instant: dt.datetime) -> None:
    """Our code's wall clock reads ``instant`` (UTC) until the test ends."""
    assert instant.tzinfo is not None
    monkeypatch.setattr("collectors.days._clock", lambda: instant.astimezone(dt.UTC))
