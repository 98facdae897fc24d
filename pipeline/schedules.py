"""The daily schedule: yesterday's partition, shortly after midnight UTC (hour configurable)."""

import os

from dagster import DefaultScheduleStatus, build_schedule_from_partitioned_job

from pipeline.jobs import daily_job

SCHEDULE_HOUR_ENV = "WATTLINE_SCHEDULE_HOUR"
AUTOMATION_ENV = "WATTLINE_AUTOMATION"
"""Set to ``off`` to start the schedule and sensor stopped (they can still be started in the UI)."""

AUTOMATION_ON = os.environ.get(AUTOMATION_ENV, "on").lower() != "off"

daily_schedule = build_schedule_from_partitioned_job(
    daily_job,
    hour_of_day=int(os.environ.get(SCHEDULE_HOUR_ENV, "1")),
    minute_of_hour=15,
    default_status=DefaultScheduleStatus.RUNNING if AUTOMATION_ON else DefaultScheduleStatus.STOPPED,
)
