"""The daily schedule: yesterday's partition, shortly after midnight UTC (hour configurable).

The partitions run up to today (``end_offset=1``, so a day being collected can be built by
hand), which makes ``build_schedule_from_partitioned_job`` pick today's partition; this
schedule names yesterday's explicitly instead.
"""

import datetime as dt
import os

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from pipeline.jobs import daily_job

SCHEDULE_HOUR_ENV = "WATTLINE_SCHEDULE_HOUR"
AUTOMATION_ENV = "WATTLINE_AUTOMATION"
"""Set to ``off`` to start the schedule and sensor stopped (they can still be started in the UI)."""

AUTOMATION_ON = os.environ.get(AUTOMATION_ENV, "on").lower() != "off"


@schedule(
    job=daily_job,
    name="daily_job_schedule",
    cron_schedule=f"15 {int(os.environ.get(SCHEDULE_HOUR_ENV, '1'))} * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING if AUTOMATION_ON else DefaultScheduleStatus.STOPPED,
)
def daily_schedule(context: ScheduleEvaluationContext):
    yesterday = (context.scheduled_execution_time.astimezone(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()
    return RunRequest(run_key=f"scheduled:{yesterday}", partition_key=yesterday)
