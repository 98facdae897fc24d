"""The daily schedule: yesterday's cluster-days, shortly after midnight UTC (hour configurable).

One run per cluster-day (the unit of parallel work; the run queue or a Kubernetes run launcher
spreads them); the fleet-day assets follow on their own once every cluster-day of the day is
there (their automation condition, see pipeline/definitions.py). Outside ``wattline ui`` the
partitions run up to today (``end_offset=1``, so a day being collected can be built by hand),
which would make ``build_schedule_from_partitioned_job`` pick today; this schedule names
yesterday explicitly. A cluster-day already built from exactly the day's current raw files (by
``wattline run``, ``demo``, the sensor or a backfill that tagged it; pipeline/built_days.py) is
skipped, so a day built shortly before the schedule's hour is not built again.
"""

import datetime as dt

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from collectors.settings import load
from pipeline.built_days import RAW_FILES_TAG, built_from, day_signature
from pipeline.jobs import CLUSTER_JOB
from pipeline.partitions import CLUSTER_DIM, cluster_day_key
from pipeline.resources import WarehouseResource

SETTINGS = load()
"""Read when the code location loads: the schedule's hour and whether automation starts on
($WATTLINE_SCHEDULE_HOUR, $WATTLINE_AUTOMATION; collectors/settings.py)."""
AUTOMATION_ON = SETTINGS.automation
SCHEDULE_NAME = "daily_schedule"


@schedule(
    job_name=CLUSTER_JOB,
    name=SCHEDULE_NAME,
    cron_schedule=f"15 {SETTINGS.schedule_hour} * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING if AUTOMATION_ON else DefaultScheduleStatus.STOPPED,
)
def daily_schedule(context: ScheduleEvaluationContext, warehouse: WarehouseResource):
    yesterday = (context.scheduled_execution_time.astimezone(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
    clusters = context.instance.get_dynamic_partitions(CLUSTER_DIM)
    if not clusters:
        return SkipReason("no cluster registered yet (the sensor registers the inventory's clusters)")
    # a day without raw files is still requested (its runs say there is nothing to read)
    signature = day_signature(warehouse.path, yesterday)
    todo = [c for c in clusters if signature is None or not built_from(context.instance, yesterday, c, signature)]
    if not todo:
        return SkipReason(f"{yesterday}: every cluster-day is already built from exactly its current raw files")
    tags = {RAW_FILES_TAG: signature} if signature else {}
    return [
        RunRequest(run_key=f"scheduled:{yesterday}:{c}", partition_key=cluster_day_key(yesterday, c), tags=tags) for c in todo
    ]
