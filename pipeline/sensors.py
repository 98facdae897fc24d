"""A sensor that re-runs a day's cluster-days when Parquet for it lands or changes (late data included).

The cursor keeps, per day, a signature of that day's raw files (names, sizes, mtimes); a day
whose signature changed gets one run per cluster, whose run_key carries the signature, so the
same files never trigger twice. It also registers the inventory's clusters as partitions. Today's
partition is skipped: collectors append to it all day, and the schedule builds it tomorrow.
"""


import datetime as dt
import hashlib
import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from collectors.contract import DATASETS
from pipeline.datadir import clusters, day_clusters, raw_files
from pipeline.jobs import CLUSTER_JOB
from pipeline.partitions import cluster_day_key, register_clusters
from pipeline.resources import WarehouseResource
from pipeline.schedules import AUTOMATION_ON


def day_signatures(data_dir) -> dict[str, str]:
    by_day: dict[str, list] = {}
    for name in DATASETS:
        for path in raw_files(data_dir, name):
            day = next(part.split("=", 1)[1] for part in path.parts if part.startswith("date="))
            st = path.stat()
            by_day.setdefault(day, []).append((str(path), st.st_size, st.st_mtime_ns))
    return {day: hashlib.sha256(repr(sorted(v)).encode()).hexdigest()[:16] for day, v in by_day.items()}


@sensor(job_name=CLUSTER_JOB, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING if AUTOMATION_ON else DefaultSensorStatus.STOPPED)
def new_parquet_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource):
    seen = json.loads(context.cursor) if context.cursor else {}
    today = dt.datetime.now(dt.UTC).date().isoformat()
    current = day_signatures(warehouse.path)
    changed = sorted(day for day, sig in current.items() if day < today and seen.get(day) != sig)
    context.update_cursor(json.dumps(current))
    by_day = {day: day_clusters(warehouse.path, day) for day in changed}
    new = register_clusters(context.instance, sorted({c for cs in by_day.values() for c in cs} | set(clusters(warehouse.path))))
    if new:
        context.log.info(f"registered cluster partition(s) {new}")
    if not changed:
        return SkipReason("no new or changed Parquet for a completed day")
    return [RunRequest(partition_key=cluster_day_key(day, c), run_key=f"{day}:{c}:{current[day]}") for day in changed for c in by_day[day]]
