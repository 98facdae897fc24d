"""Which cluster-days were built from exactly their day's current raw files.

A day's signature is a hash of its raw files' names (relative to the data dir), sizes and mtimes.
``wattline run`` (and ``demo``) tag each cluster-day run with the signature the day's files had
when it finished, the sensor and the schedule with the one they launch on (:data:`RAW_FILES_TAG`):
so the sensor, the schedule and a first start of the UI skip a cluster-day already built from the
same files, whoever built it, and build it again when a file lands or changes.
"""

import hashlib
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from collectors.contract import DATASETS
from pipeline.constants import CLUSTER_DIM, DATE_DIM
from pipeline.datadir import raw_files
from pipeline.jobs import CLUSTER_JOB

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


BUILT_OR_BUILDING = [
    DagsterRunStatus.SUCCESS, DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING, DagsterRunStatus.STARTED,
]
"""A run in one of these states has built, or is building, its cluster-day; a failed or canceled one
has not, so the sensor's first tick and the schedule build the day again."""


def built_from(instance: DagsterInstance, day: str, cluster: str, signature: str) -> bool:
    """Whether a cluster-day run read, or is reading, exactly these files (a run tagged with the
    signature that did not fail and was not canceled)."""
    tags = {RAW_FILES_TAG: signature, PARTITION_TAG + DATE_DIM: day, PARTITION_TAG + CLUSTER_DIM: cluster}
    runs = RunsFilter(job_name=CLUSTER_JOB, tags=tags, statuses=BUILT_OR_BUILDING)
    return bool(instance.get_run_ids(runs, limit=1))
