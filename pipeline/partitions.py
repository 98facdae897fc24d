"""How the work is cut: UTC days, and day × cluster for everything that reads per-GPU data.

A cluster-day is the unit of parallel work (see docs/scale-out.md): every asset that reads raw
samples or per-GPU tables is partitioned by ``date`` × ``cluster`` and writes its own Parquet
part, so any number of workers can build cluster-days at once. Fleet-level assets (role and
fleet rollups, cross-cluster correlation, the report) are partitioned by day only and read the
per-cluster reduced parts. Clusters are dynamic partitions, registered from ``inventory.yaml``
(by ``wattline run`` and by the sensor), so adding a cluster needs no code change.

The daily partitions start at :func:`partitions_start`: in ``wattline ui``, the first day with raw
files in the data dir (scanned once when the code location loads), and end at the last completed
day (:func:`partitions_end_offset`), so the UI's partition bars, "Latest" and the Materialize
dialog describe the user's data rather than every day since 2020 and a day still being collected.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from dagster import DailyPartitionsDefinition, DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from collectors.atomic import TMP_PREFIX
from collectors.contract import DATASETS
from collectors.days import run_day_problem, today_utc
from collectors.settings import FIRST_DAY_ENV, load
from pipeline.constants import CLUSTER_DIM, DATE_DIM, START_DATE

FROM_DATA = "data"
"""``WATTLINE_FIRST_DAY=data``: the partitions start at the data dir's first day with raw files."""


def first_data_day(data_dir: Path, today: dt.date) -> str | None:
    """The earliest ``date=`` folder of a raw dataset that holds a file, on a day that has a
    partition on ``today`` (None: no raw data)."""
    days = []
    for name in DATASETS:
        for folder in sorted((data_dir / name).glob("date=*")):
            day = folder.name.split("=", 1)[1]
            if run_day_problem(day, today) is None and any(p.is_file() and not p.name.startswith(TMP_PREFIX) for p in folder.rglob("*")):
                days.append(day)
                break
    return min(days) if days else None


def partitions_start(today: dt.date) -> str:
    """First day of the daily partitions, from ``WATTLINE_FIRST_DAY``: a day, ``data`` (the data
    dir's first day with raw files, ``today`` if it has none; an S3 data dir: the whole range), or
    unset: the whole range ``wattline run`` accepts (collectors/days.py)."""
    settings = load()
    value = settings.first_day
    if not value:
        return START_DATE
    if value == FROM_DATA:
        if "://" in settings.data_dir:
            return START_DATE
        return first_data_day(Path(settings.data_dir), today) or today.isoformat()
    try:
        problem = run_day_problem(value, today)
    except ValueError:
        problem = f"{value!r} is not a day (YYYY-MM-DD) or {FROM_DATA!r}"
    if problem:
        raise ValueError(f"{FIRST_DAY_ENV}: {problem}")
    return dt.date.fromisoformat(value).isoformat()


def partitions_end_offset(start: str, today: dt.date) -> int:
    """1 (the last partition is today, the day being collected) when the partitions span every
    day ``wattline run`` accepts; 0 (the last is yesterday, the last completed day) when they start
    from ``WATTLINE_FIRST_DAY`` as in ``wattline ui``, so "Latest", "All" and the partitions page
    (what the lineage page's "Materialize all" offers) are the data's completed days, not a day
    still being collected. A start of today keeps today, so there is a partition."""
    if not load().first_day or start >= today.isoformat():
        return 1
    return 0


_TODAY = today_utc()
"""Read once when the code location loads, so the first day and the end offset agree about the day."""
_START = partitions_start(_TODAY)
daily_partitions = DailyPartitionsDefinition(start_date=_START, end_offset=partitions_end_offset(_START, _TODAY))
cluster_partitions = DynamicPartitionsDefinition(name=CLUSTER_DIM)
day_cluster_partitions = MultiPartitionsDefinition({DATE_DIM: daily_partitions, CLUSTER_DIM: cluster_partitions})


def cluster_day_key(date: str, cluster: str) -> MultiPartitionKey:
    return MultiPartitionKey({DATE_DIM: date, CLUSTER_DIM: cluster})


def register_clusters(instance, clusters: list[str]) -> list[str]:
    """Add the clusters the instance does not know yet as partitions; returns the new ones."""
    known = set(instance.get_dynamic_partitions(CLUSTER_DIM))
    new = [c for c in clusters if c not in known]
    if new:
        instance.add_dynamic_partitions(CLUSTER_DIM, new)
    return new
