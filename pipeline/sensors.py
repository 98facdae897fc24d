"""A sensor that re-runs a day's cluster-days when Parquet for it lands or changes (late data included).

The cursor keeps, per day, a signature of that day's raw files (names relative to the data dir,
sizes, mtimes); a day whose signature changed gets one run per cluster, whose run_key carries the
signature, so the same files never trigger twice. A cluster-day already built from exactly these
files is skipped: ``wattline run`` (and ``demo``) tag their cluster-day runs with the signature
the day's files had when the day finished (:data:`RAW_FILES_TAG`), so a first start of the UI
after a run does not build the day again. It also registers the inventory's clusters as
partitions. Today's partition is skipped: collectors append to it all day, and the schedule
builds it tomorrow.
"""


import datetime as dt
import hashlib
import json
from pathlib import Path

from dagster import DagsterInstance, DefaultSensorStatus, RunRequest, RunsFilter, SensorEvaluationContext, SkipReason, sensor

from collectors.contract import DATASETS
from pipeline.constants import CLUSTER_DIM, DATE_DIM
from pipeline.datadir import clusters, day_clusters, raw_files
from pipeline.jobs import CLUSTER_JOB
from pipeline.partitions import cluster_day_key, daily_partitions, register_clusters
from pipeline.resources import WarehouseResource
from pipeline.schedules import AUTOMATION_ON

RAW_FILES_TAG = "wattline/raw_files"
"""Run tag of a cluster-day run: the signature of its day's raw files (:func:`day_signature`)."""
PARTITION_TAG = "dagster/partition/"
"""Dagster's run tag prefix for one dimension of a multi-partition key."""


def _signature(entries: list) -> str:
    return hashlib.sha256(repr(sorted(entries)).encode()).hexdigest()[:16]


def _entry(data_dir: Path, path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (path.relative_to(data_dir).as_posix(), st.st_size, st.st_mtime_ns)


def day_signatures(data_dir) -> dict[str, str]:
    """Every day's signature: the same whatever path the data dir is reached by."""
    data_dir = Path(data_dir)
    by_day: dict[str, list] = {}
    for name in DATASETS:
        for path in raw_files(data_dir, name):
            day = next(part.split("=", 1)[1] for part in path.parts if part.startswith("date="))
            by_day.setdefault(day, []).append(_entry(data_dir, path))
    return {day: _signature(v) for day, v in by_day.items()}


def day_signature(data_dir, day: str) -> str | None:
    """One day's signature, as :func:`day_signatures` gives it; None for a day without raw files."""
    data_dir = Path(data_dir)
    entries = [_entry(data_dir, p) for name in DATASETS for p in raw_files(data_dir, name, day)]
    return _signature(entries) if entries else None


def built_from(instance: DagsterInstance, day: str, cluster: str, signature: str) -> bool:
    """Whether a cluster-day run already read exactly these files (a run tagged with the signature)."""
    tags = {RAW_FILES_TAG: signature, PARTITION_TAG + DATE_DIM: day, PARTITION_TAG + CLUSTER_DIM: cluster}
    return bool(instance.get_run_ids(RunsFilter(job_name=CLUSTER_JOB, tags=tags), limit=1))


def cluster_days_to_build(instance: DagsterInstance, data_dir, seen: dict[str, str]) -> tuple[dict[str, str], list[str], list[tuple[str, str]]]:
    """What the sensor would do now: (every day's signature, the completed days whose files are
    new or changed since ``seen``, their cluster-days not yet built from exactly these files)."""
    today = dt.datetime.now(dt.UTC).date().isoformat()
    current = day_signatures(data_dir)
    changed = sorted(day for day, sig in current.items() if day < today and seen.get(day) != sig)
    todo = [(day, c) for day in changed for c in day_clusters(Path(data_dir), day) if not built_from(instance, day, c, current[day])]
    return current, changed, todo


@sensor(job_name=CLUSTER_JOB, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING if AUTOMATION_ON else DefaultSensorStatus.STOPPED)
def new_parquet_sensor(context: SensorEvaluationContext, warehouse: WarehouseResource):
    seen = json.loads(context.cursor) if context.cursor else {}
    current, changed, todo = cluster_days_to_build(context.instance, warehouse.path, seen)
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
