"""A sensor that re-runs a day when Parquet for it lands or changes (late data included).

The cursor keeps, per day, a signature of that day's raw files (names, sizes, mtimes); a day
whose signature changed gets a run whose run_key is the signature, so the same files never
trigger twice. Today's partition is skipped: collectors append to it all day, and the
schedule builds it tomorrow.
"""


import datetime as dt
import hashlib
import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from collectors.contract import DATASETS
from pipeline import warehouse as wh
from pipeline.jobs import daily_job
from pipeline.resources import WarehouseResource
from pipeline.schedules import AUTOMATION_ON


def day_signatures(data_dir) -> dict[str, str]:
    by_day: dict[str, list] = {}
    for name in DATASETS:
        for path in wh.raw_files(data_dir, name):
            day = next(part.split("=", 1)[1] for part in path.parts if part.startswith("date="))
            st = path.stat()
            by_day.setdefault(day, []).append((str(path), st.st_size, st.st_mtime_ns))
    return {day: hashlib.sha256(repr(sorted(v)).encode()).hexdigest()[:16] for day, v in by_day.items()}


@sensor(job=daily_job, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING if AUTOMATION_ON else DefaultSensorStatus.STOPPED)
def new_parquet_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource):
    seen = json.loads(context.cursor) if context.cursor else {}
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    current = day_signatures(warehouse.path)
    changed = sorted(day for day, sig in current.items() if day < today and seen.get(day) != sig)
    context.update_cursor(json.dumps(current))
    if not changed:
        return SkipReason("no new or changed Parquet for a completed day")
    return [RunRequest(partition_key=day, run_key=f"{day}:{current[day]}") for day in changed]
