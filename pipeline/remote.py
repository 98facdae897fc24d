"""The pipeline on an ``s3://`` data dir: a local working copy, staged in and published out.

DuckDB computes on local files (httpfs cannot be installed: docs/storage.md). For an S3 data
dir the pipeline works in a local *work dir* with the same relative layout as the bucket prefix:

- :func:`stage` (before a computation): downloads what the scope reads: ``inventory.yaml``, the
  ``assignments`` dataset (not date-partitioned: every file), the quarantine log, and for a
  cluster-day its hosts' raw power files, the day's requests and job_events (and the earlier
  days' job_events, $WATTLINE_JOB_EVENTS_LOOKBACK_DAYS back: a run into the day holds its GPUs) and the cluster's own derived parts; for a
  fleet-day the day's derived parts of every table but the per-GPU ones, and the trailing days of
  ``hourly_activity``. Each staged folder is *mirrored*: unchanged files are skipped, files gone
  from the bucket (a re-simulated day, a quarantined file) are deleted locally, so they never
  linger as inputs.
- :func:`publish_part` (after a derived part is written locally): uploads it under the same key.
- :func:`mirror_for_readers` (``wattline sql / report / ui``, through ``warehouse.reader_dir``): mirrors ``derived/``, ``assignments/`` and the quarantine
  log into the work dir, then the catalog is built locally as for a local data dir.

This module is the one place that knows the difference: for a local data dir every function
here is a no-op and the work dir *is* the data dir. ``warehouse.duckdb`` stays in the work dir
and is never uploaded (its views hold local paths).
"""

from __future__ import annotations

import datetime as dt
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from collectors.contract import ASSIGNMENTS_DIR, QUARANTINE_DIR
from collectors.inventory import INVENTORY_FILE
from collectors.names import inside_key
from collectors.settings import DEFAULT_JOB_EVENTS_LOOKBACK_DAYS, load
from collectors.storage import DataRoot, LocalRoot, resolve_data_root
from pipeline import sqlfiles
from pipeline.constants import DERIVED_DIR, DIURNAL_TRAILING_DAYS, warehouse_path
from pipeline.datadir import cluster_members, host_filter, load_inventory_if_any, quarantine_lock
from pipeline.scope import PER_GPU_TABLES, UNASSIGNED, Scope

RAW_DAY_DATASETS = ("requests", "job_events")
"""Raw datasets staged whole for a cluster-day (their views filter the cluster's rows)."""
MIRROR_THREADS = 8

_roots: dict[Path, DataRoot] = {}
"""Work dir → its S3 root, for code that only gets the local dir (quarantine)."""


def is_s3(value: object) -> bool:
    return isinstance(value, str) and value.startswith("s3://")


DataDir = Path | str
"""A data dir as an entry point resolved it (the CLI's ``--data-dir`` / $WATTLINE_DATA_DIR, the
settings' ``data_dir``): a local folder's Path, or an ``s3://bucket/prefix`` URL string."""


def open_root(value: DataDir | os.PathLike | DataRoot) -> DataRoot:
    """The data dir as a root: a local path (resolved like the CLI), or an ``s3://`` URL. Never
    empty: the entry point has resolved it (no fallback to the environment here)."""
    if isinstance(value, DataRoot):
        return value
    if not str(value):
        raise ValueError("no data dir given: the entry point resolves it (--data-dir, WATTLINE_DATA_DIR)")
    return DataRoot.open(resolve_data_root(value))


def work_dir(root: DataRoot) -> Path:
    """The local directory DuckDB works in: the data dir itself for a local root; for S3
    $WATTLINE_WORK_DIR, else ``root.state_dir()/work``."""
    if isinstance(root, LocalRoot):
        return root.path
    env = load().work_dir
    work = (Path(env).expanduser() if env else root.state_dir() / "work").resolve()
    _roots[work] = root
    return work


def local_dir(value: DataDir | os.PathLike | DataRoot) -> Path:
    """The local dir for a data dir value (a Path stays as given; a URL gives its work dir)."""
    if not is_s3(value) and not isinstance(value, DataRoot):
        return Path(value)
    return work_dir(open_root(value))


def root_for(local: Path) -> DataRoot | None:
    """The S3 root whose work dir is ``local``; None for a local data dir."""
    return _roots.get(Path(local).resolve()) if _roots else None


def key_of(work: Path, path: Path) -> str:
    return Path(path).resolve().relative_to(work.resolve()).as_posix()


def stage(root: DataRoot, work: Path, scope: Scope | str | None = None,
          lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS) -> None:
    """Bring into ``work`` what a computation of ``scope`` reads (module docstring), job_events
    ``lookback_days`` back (the job_events_lookback_days setting); no-op locally."""
    if root.is_local:
        return
    _mirror_file(root, work, INVENTORY_FILE)
    if scope is None:
        return
    scope = scope if isinstance(scope, Scope) else Scope(date=scope)
    day = scope.date
    quarantined = [f"{QUARANTINE_DIR}/file_log"] + [f"{QUARANTINE_DIR}/files/{ds}/date={day}" for ds in ("power", *RAW_DAY_DATASETS)]
    with quarantine_lock(work):  # never between another worker's quarantine and its upload
        mirror_all(root, work, quarantined)
    folders = [ASSIGNMENTS_DIR]
    if scope.cluster:
        folders += [inside_key("power", f"date={day}", f"host={h}") for h in _hosts_to_stage(root, work, scope)]
        folders += [f"{ds}/date={day}" for ds in RAW_DAY_DATASETS] + [f"job_events/date={d}" for d in _earlier_days(day, lookback_days)]
        folders += [inside_key(DERIVED_DIR, t, f"date={day}", f"cluster={scope.cluster}") for t in sqlfiles.table_names()]
    elif scope.fleet:
        folders += [f"{DERIVED_DIR}/{t}/date={day}" for t in sqlfiles.table_names() if t not in PER_GPU_TABLES]
        folders += [f"{DERIVED_DIR}/hourly_activity/date={d}" for d in _trailing_days(day)]
    else:  # a whole day without a scope (a local-style run of one date)
        folders += [f"{ds}/date={day}" for ds in ("power", *RAW_DAY_DATASETS)] + [f"job_events/date={d}" for d in _earlier_days(day, lookback_days)]
        folders += [f"{DERIVED_DIR}/{t}/date={day}" for t in sqlfiles.table_names()]
    mirror_all(root, work, folders)


def mirror_all(root: DataRoot, work: Path, prefixes: list[str]) -> int:
    """``root.mirror`` of each prefix into ``work``, several at once; returns files changed."""
    with ThreadPoolExecutor(max_workers=max(1, min(MIRROR_THREADS, len(prefixes)))) as pool:
        results = list(pool.map(lambda p: root.mirror(p, work), prefixes))
    return sum(r.downloaded + r.deleted for r in results)


def publish_part(root: DataRoot, work: Path, part: Path) -> None:
    """Upload a derived part written locally under the same key; the local copy takes the
    object's mtime so the next :func:`stage` sees it up to date. No-op locally."""
    if root.is_local:
        return
    key = key_of(work, part)
    root.upload(part, key)
    mtime = root.stat(key).mtime_ns
    os.utime(part, ns=(mtime, mtime))


def mirror_for_readers(value: str | os.PathLike | DataRoot, date: str | None = None) -> tuple[Path, bool]:
    """The local dir readers (``wattline sql / report / ui``) work on, and whether the catalog
    there must be rebuilt (``warehouse.reader_dir`` does). For S3: mirror ``derived/`` (a cache
    of every derived table, growing with history), ``assignments/``, the quarantine log and its files,
    ``inventory.yaml`` and (with ``date``) the day's row-level quarantine. A local data dir is
    returned as is."""
    root = open_root(value)
    work = work_dir(root)
    if root.is_local:
        return work, False
    work.mkdir(parents=True, exist_ok=True)
    prefixes = [DERIVED_DIR, ASSIGNMENTS_DIR]
    if date:
        prefixes += [f"{QUARANTINE_DIR}/{ds}/date={date}" for ds in ("power", *RAW_DAY_DATASETS)]
    with quarantine_lock(work):  # never between a run's quarantine and its upload (datadir.quarantine_lock)
        changed = mirror_all(root, work, [f"{QUARANTINE_DIR}/file_log", f"{QUARANTINE_DIR}/files"])
    changed += mirror_all(root, work, prefixes) + _mirror_file(root, work, INVENTORY_FILE)
    return work, bool(changed) or not warehouse_path(work).exists()


def _earlier_days(day: str, lookback_days: int) -> list[str]:
    """The days before ``day`` whose job events can still run into it."""
    d = dt.date.fromisoformat(day)
    return [(d - dt.timedelta(days=n)).isoformat() for n in range(1, lookback_days + 1)]


def _trailing_days(day: str) -> list[str]:
    d = dt.date.fromisoformat(day)
    return [(d - dt.timedelta(days=i)).isoformat() for i in range(1, DIURNAL_TRAILING_DAYS)]


def _hosts_to_stage(root: DataRoot, work: Path, scope: Scope) -> list[str]:
    """The cluster's hosts; for UNASSIGNED, the day's hosts with power files on S3 that the
    inventory does not list."""
    inventory = load_inventory_if_any(work)
    if scope.cluster != UNASSIGNED:
        return cluster_members(inventory, scope.cluster)[0] if inventory else []
    return unassigned_hosts(root, work, scope.date)


def unassigned_hosts(root: DataRoot, work: Path, date: str) -> list[str]:
    """Hosts of the day missing from the inventory, with power files on S3 or (to be dropped
    by the mirror when gone from S3) in the work dir."""
    mine = host_filter(load_inventory_if_any(work), UNASSIGNED)
    day_hosts = {k.split("/")[2].split("=", 1)[1] for k in root.list(f"power/date={date}/host=*/*.parquet")}
    day_hosts |= {p.name.split("=", 1)[1] for p in (work / "power" / f"date={date}").glob("host=*")}
    return sorted(h for h in day_hosts if mine(h))


def stage_day_plan(root: DataRoot, work: Path, date: str) -> None:
    """What the runner needs to plan a day on S3: ``inventory.yaml`` and the power files of
    hosts missing from it (they make the UNASSIGNED cluster-day: ``datadir.day_clusters``)."""
    if root.is_local:
        return
    stage(root, work)
    mirror_all(root, work, [inside_key("power", f"date={date}", f"host={h}") for h in unassigned_hosts(root, work, date)])


def delete_stale_objects(data_dir: str | os.PathLike, date: str, clusters: list[str], tables: list[str] | None = None) -> list[str]:
    """On S3, delete the day's cluster parts of clusters not in ``clusters`` (for
    ``warehouse.remove_stale_parts``, which does the same in the work dir), so no fleet-day stages them again.
    ``tables``: only these tables' parts (None: every table's). Returns the deleted keys; no-op locally."""
    root = open_root(data_dir)
    if root.is_local:
        return []
    keep = {f"cluster={c}" for c in clusters}
    names = [t for t in sqlfiles.table_names() if tables is None or t in tables]
    with ThreadPoolExecutor(max_workers=MIRROR_THREADS) as pool:
        listed = pool.map(lambda t: root.list(f"{DERIVED_DIR}/{t}/date={date}/cluster=*/*.parquet"), names)
        stale = [k for keys in listed for k in keys if k.split("/")[3] not in keep]
    for key in stale:
        root.delete(key)
    return stale


def _mirror_file(root: DataRoot, work: Path, key: str) -> int:
    """One file: download it if new or changed, delete the local copy if gone; 1 if changed."""
    local = work / key
    try:
        st = root.stat(key)
    except FileNotFoundError:
        if local.exists():
            local.unlink()
            return 1
        return 0
    if local.is_file() and local.stat().st_size == st.size and local.stat().st_mtime_ns == st.mtime_ns:
        return 0
    root.stage([key], work)
    return 1
