"""A sensor that re-runs a day's cluster-days when Parquet for it lands or changes (late data included).

The cursor keeps, per day, a signature of that day's raw files (names relative to the data dir,
sizes, mtimes); a day whose signature changed gets one run per cluster, whose run_key carries the
signature, so the same files never trigger twice. A cluster-day already built from exactly these
files is skipped (pipeline/built_days.py: ``wattline run``, ``demo`` and the schedule tag their
runs with it), so a first start of the UI after a run does not build the day again. It also registers the inventory's clusters as
partitions. Today's partition is skipped: collectors append to it all day, and the schedule
builds it tomorrow.
"""


import datetime as dt
import json
from pathlib import Path

from dagster import DagsterInstance, DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from collectors.days import today_utc
from pipeline.built_days import RAW_FILES_TAG, built_from, day_signatures
from pipeline.datadir import clusters, day_clusters
from pipeline.jobs import CLUSTER_JOB
from pipeline.partitions import cluster_day_key, daily_partitions, register_clusters
from pipeline.resources import WarehouseResource
from pipeline.schedules import AUTOMATION_ON


def cluster_days_to_build(instance: DagsterInstance, data_dir, seen: dict[str, str], today: dt.date) -> tuple[dict[str, str], list[str], list[tuple[str, str]]]:
    """What the sensor would do on ``today`` (UTC; every earlier day is completed): (every day's
    signature, the completed days whose files are new or changed since ``seen``, their
    cluster-days not yet built from exactly these files)."""
    current = day_signatures(data_dir)
    changed = sorted(day for day, sig in current.items() if day < today.isoformat() and seen.get(day) != sig)
    todo = [(day, c) for day in changed for c in day_clusters(Path(data_dir), day) if not built_from(instance, day, c, current[day])]
    return current, changed, todo


@sensor(job_name=CLUSTER_JOB, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING if AUTOMATION_ON else DefaultSensorStatus.STOPPED)
def new_parquet_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource):
    seen = json.loads(context.cursor) if context.cursor else {}
    current, changed, todo = cluster_days_to_build(context.instance, warehouse.path, seen, today_utc())
    first = daily_partitions.start.date().isoformat()
    early = sorted({day for day, _ in todo if day < first})
    # a day before the partitions' first day cannot be launched until the code location reloads
    # (its start is the data's first day, scanned at load): left out of the cursor until then
    context.update_cursor(json.dumps({day: sig for day, sig in current.items() if day not in early}))
    new = register_clusters(context.instance, sorted({c for _, c in todo} | set(clusters(warehouse.path))))
    if new:
        context.log.info(f"registered cluster partition(s) {new}")
    if early:
        context.log.warning(f"new files for day(s) {', '.join(early)}, before the partitions' first day {first}: "
                            "reload the code location (Deployment → Reload, or restart `wattline ui`) to build them")
    todo = [(day, c) for day, c in todo if day not in early]
    if not changed:
        return SkipReason("no new or changed Parquet for a completed day")
    if not todo:
        return SkipReason(f"{len(changed)} day(s) with new files, each cluster-day already built from exactly these files"
                          + (f"; {len(early)} before the partitions' first day: reload the code location" if early else ""))
    return [
        RunRequest(partition_key=cluster_day_key(day, c), run_key=f"{day}:{c}:{current[day]}", tags={RAW_FILES_TAG: current[day]})
        for day, c in todo
    ]
