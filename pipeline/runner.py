"""Materialize one day through Dagster's Python API: the same job, instance and asset code as the UI.

Runs go into the Dagster instance at ``<data-dir>/.dagster`` (``DAGSTER_HOME``; its
``dagster.yaml`` is the repo's), so `wattline run` and `wattline ui` show the same history.
Two runs on one data dir serialize on a file lock instead of fighting over files.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import shutil
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, Definitions

from collectors.atomic import exclusive_lock
from collectors.contract import DATASETS
from collectors.settings import Settings, load
from pipeline import file_quarantine, remote, warehouse
from pipeline.built_days import RAW_FILES_TAG, day_signature
from pipeline.constants import DAGSTER_HOME_DIR, REPO_DAGSTER_YAML
from pipeline.datadir import day_clusters, linked_paths
from pipeline.definitions import build_definitions
from pipeline.jobs import CLUSTER_JOB, FLEET_JOB
from pipeline.partitions import cluster_day_key, register_clusters
from pipeline.remote import DataDir, local_dir
from pipeline.scope import PER_GPU_TABLES, UNASSIGNED
from pipeline.series import cache as curve_cache


@dataclass
class FailedCheck:
    asset: str
    check: str
    severity: str
    description: str
    partition: str = ""
    """The cluster for a cluster-day's check, the date for the fleet-day's."""


@dataclass
class RunOutcome:
    date: str
    success: bool
    run_id: str
    materialized: list[str] = field(default_factory=list)
    failed_checks: list[FailedCheck] = field(default_factory=list)
    error: str | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    step_peak_rss_mb: dict[str, float] = field(default_factory=dict)
    """The process's peak RSS while each step ran (its largest over the cluster-days), where known."""
    """Seconds per step, summed over the day's cluster-days (wall time of each step)."""
    run_ids: list[str] = field(default_factory=list)
    cluster_days: int = 0
    fleet_day_ran: bool = False
    quarantined: list[dict] = field(default_factory=list)
    """The day's files still in quarantine (every dataset, including ones no check covers yet)."""
    converted: list[dict] = field(default_factory=list)
    """The day's files accepted with lossless casts (rewritten; their originals kept in quarantine)."""
    links: list[dict] = field(default_factory=list)
    """The day's symbolic links where raw files are looked for (dataset, path, target): not read."""

    @property
    def error_checks(self) -> list[FailedCheck]:
        return [c for c in self.failed_checks if c.severity == "ERROR"]

    @property
    def ok(self) -> bool:
        return self.success and not self.error_checks


def dagster_home(data_dir: DataDir) -> Path:
    """``<data-dir>/.dagster`` (for an S3 data dir ``<work dir>/.dagster``) holding a copy of
    the repo's dagster.yaml (refreshed if it changed)."""
    home = local_dir(data_dir) / DAGSTER_HOME_DIR
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if not target.exists() or target.read_bytes() != REPO_DAGSTER_YAML.read_bytes():
        # Copy then rename: a concurrent `wattline run` must never read a half-copied file.
        tmp = home / f".dagster.yaml.{os.getpid()}"
        shutil.copyfile(REPO_DAGSTER_YAML, tmp)
        os.replace(tmp, target)
    return home


@contextlib.contextmanager
def run_lock(data_dir: Path):
    """Waits (saying so once on stderr) while another run holds this data dir; never fails."""
    with exclusive_lock(data_dir / ".run.lock",
                        on_wait=lambda: print(f"waiting for another run on {data_dir} to finish...", file=sys.stderr, flush=True)):
        yield


WORKER_MIN_MEMORY_MB = 2048
"""The default memory bound gives each worker at least this: a 64-GPU cluster-day's phase_timeline
(then SQL) ran Out of Memory with 1.1 GiB (two workers sharing 2.5 GiB); every asset measured at
64 GPU-days completes with 2 GiB (docs/benchmarks.md)."""


def default_workers(clusters: int, settings: Settings) -> int:
    """The workers setting ($WATTLINE_WORKERS), else one worker process per core, at most one per
    cluster and, under the default memory bound, one per WORKER_MIN_MEMORY_MB of it (a memory
    setting, $WATTLINE_DUCKDB_MEMORY, gives each worker that much, so it does not limit them)."""
    if settings.workers:
        return max(1, settings.workers)
    by_memory = clusters if settings.duckdb_memory else warehouse.default_memory_mb() // WORKER_MIN_MEMORY_MB
    return max(1, min(clusters, os.cpu_count() or 1, by_memory))


def run_day(
    data_dir: DataDir, date: str, *, selection: list[str] | None = None, workers: int | None = None, fleet_day: bool = True,
    settings: Settings | None = None,
) -> RunOutcome:
    """Materialize day ``date``: one run of ``cluster_day_job`` per cluster of the inventory
    (``workers`` of them at a time, each in its own process), then one run of ``fleet_day_job``.
    ``selection``: only these assets (by name, ``swing_stats`` being both the cluster-days' and
    ``fleet/swing_stats``; or by full key). ``fleet_day=False``: the cluster-days only.

    The same jobs, instance and asset code as the UI: Dagster records one run per cluster-day
    and one for the fleet-day. Worker processes play the part that a run launcher plays in a
    deployment (docs/scale-out.md); each runs the in-process executor on its cluster-day.
    ``data_dir``: a local folder or an ``s3://`` URL (then the runs, lock and Dagster home are
    in its local work dir, and the workers stage and publish through the bucket).
    ``settings``: the run's (collectors/settings.py); None reads them from the environment now,
    once: each worker process gets them as an argument, with its share of threads and memory.
    """
    settings = settings if settings is not None else load()
    url, data_dir = _work_dir(data_dir, date)
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_dir))
    warnings.filterwarnings("ignore", module="dagster")
    clusters = day_clusters(data_dir, date)
    workers = workers or default_workers(len(clusters), settings)
    outcome = RunOutcome(date=date, success=True, run_id="")
    # One Dagster instance for every run of this process (opening one reads dagster.yaml and checks
    # each SQLite file's schema); a worker process opens its own.
    with run_lock(data_dir), DagsterInstance.get() as instance:
        warehouse.remove_stale_tmp(data_dir)
        # A whole day: its parts are exactly its current cluster-days'. A selection: the tables it
        # rebuilds lose their parts of clusters gone (a host now listed would count twice).
        warehouse.remove_stale_parts(data_dir, date, clusters, url, tables=_cluster_tables(selection))
        register_clusters(instance, clusters)
        parts = [(url, date, c, selection, worker_settings(settings, workers)) for c in clusters]
        built: dict[Settings, Definitions] = {}  # the code location, built once for this process's runs
        if workers > 1 and len(parts) > 1:
            ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked DuckDB or Dagster state
            with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                results = list(pool.map(_run_part, parts))
        else:
            results = [_run_part(p, instance, built) for p in parts]
        if not selection and not remote.is_s3(url):
            _tag_raw_files(instance, data_dir, date, [r["run_id"] for r in results if r["run_id"]])
        if fleet_day and (all(r["success"] for r in results) or not results):
            results.append(_run_part((url, date, None, selection, settings), instance, built))
        if warehouse.warehouse_path(data_dir).exists():  # a table gone with stale parts and no part after it
            warehouse.refresh_catalog(data_dir)
    for r in results:
        _merge(outcome, r)
    logged = file_quarantine.entries(data_dir, date)
    outcome.quarantined = [e for e in logged if e["kind"] != "converted"]
    outcome.converted = [e for e in logged if e["kind"] == "converted"]
    outcome.links = [dict(dataset=name, path=str(link), target=target)
                     for name in DATASETS for link, target in linked_paths(data_dir, name, date).items()]
    return outcome


def _tag_raw_files(instance: DagsterInstance, data_dir: Path, date: str, run_ids: list[str]) -> None:
    """Tag the day's cluster-day runs with the signature its raw files have now that they ran
    (after any quarantine moved or rewrote files), so the new-Parquet sensor knows the day was
    built from them and a first start of the UI launches nothing (pipeline/built_days.py)."""
    signature = day_signature(data_dir, date)
    if signature is None or not run_ids:
        return
    for run_id in run_ids:
        instance.add_run_tags(run_id, {RAW_FILES_TAG: signature})


def _work_dir(data_dir: DataDir, date: str) -> tuple[str, Path]:
    """(what workers get: the data dir as given or its URL, the local dir the runner works in);
    for S3, what the day's cluster list comes from is staged first (pipeline/remote.py)."""
    if not remote.is_s3(data_dir):
        return str(data_dir), Path(data_dir)
    root = remote.open_root(data_dir)
    work = remote.work_dir(root)
    remote.stage_day_plan(root, work, date)
    return root.url, work


def worker_settings(settings: Settings, workers: int) -> Settings:
    """A worker's settings: its share of the cores (DuckDB threads) and of the memory bound, unless
    the settings give them (then each of N workers uses what one would)."""
    if workers > 1 and not settings.duckdb_threads:
        settings = replace(settings, duckdb_threads=max(1, (os.cpu_count() or 1) // workers))
    if workers > 1 and not settings.duckdb_memory:
        settings = replace(settings, duckdb_memory=f"{max(256, warehouse.default_memory_mb() // workers)}MB")
    return settings


def _run_part(
    args: tuple[str, str, str | None, list[str] | None, Settings], instance: DagsterInstance | None = None,
    built: dict[Settings, Definitions] | None = None,
) -> dict:
    """One Dagster run: a cluster-day (``cluster`` given) or the fleet-day, with the run's
    ``settings`` (a value: a worker process gets them as this argument), in ``instance`` (None:
    the data dir's, opened for this run). ``built``: the code location already built for the same
    data dir by settings (the day's other runs in this process), added to. Returns plain data, so
    it can come back from a worker process."""
    data_dir, date, cluster, selection, settings = args
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_dir))  # Dagster's own variable: where DagsterInstance.get() looks
    warnings.filterwarnings("ignore", module="dagster")
    if instance is None:
        with DagsterInstance.get() as own:
            return _run_part(args, own, built)

    built = {} if built is None else built
    if settings not in built:
        built[settings] = build_definitions(data_dir, settings)
    defs = built[settings]
    job = defs.resolve_job_def(CLUSTER_JOB if cluster else FLEET_JOB)
    selected = _select(job, selection)
    if cluster == UNASSIGNED:  # hosts missing from the inventory: their per-GPU tables only
        selected = [k for k in (selected or job.asset_layer.selected_asset_keys) if k.path[-1] in PER_GPU_TABLES]
    part: dict[str, Any] = {"cluster": cluster, "success": True, "run_id": "", "materialized": [], "failed_checks": [], "error": None, "step_seconds": {},
            "step_peak_rss_mb": {}}
    if selection and not selected:
        return part
    with warehouse.catalog_refresh_deferred():  # the catalog brought up to date once for the run's parts
        result = job.execute_in_process(
            partition_key=cluster_day_key(date, cluster) if cluster else date,
            instance=instance,
            raise_on_error=False,
            # Dagster's console logger prints stack traces for failed steps: the CLI reports
            # failures and quarantined files itself in one line each; the UI keeps the details.
            run_config={"loggers": {"console": {"config": {"log_level": settings.log_level}}}},
            asset_selection=selected,
        )
    curve_cache.drop(result.run_id)  # the run's curves served its steps; keep no run's files past its end
    warehouse.close_shared()  # the compute connection its steps shared
    part["success"], part["run_id"] = result.success, result.run_id
    for event in result.all_events:
        if event.is_step_success and event.step_key:
            part["step_seconds"][event.step_key] = event.step_success_data.duration_ms / 1000
    for e in result.get_asset_materialization_events():
        peak = e.materialization.metadata.get("peak_rss_mb")
        if peak is not None and e.step_key and isinstance(peak.value, int | float):
            part["step_peak_rss_mb"][e.step_key] = float(peak.value)
    part["materialized"] = [e.asset_key.to_user_string() for e in result.get_asset_materialization_events()]
    part["failed_checks"] = [
        dict(asset=e.asset_key.to_user_string(), check=e.check_name, severity=e.severity.value, description=e.description or "", partition=cluster or date)
        for e in result.get_asset_check_evaluations()
        if not e.passed
    ]
    if not result.success:
        failures = [e for e in result.all_events if e.is_failure and e.step_key]
        where = f"[{cluster}] " if cluster else ""
        part["error"] = "; ".join(f"{where}{e.step_key}: {_root_cause(e)}" for e in failures) or "run failed"
    return part


def asset_names() -> list[str]:
    """Every name ``selection`` takes: asset names, and the full keys of assets whose key is more
    than a name (``fleet/swing_stats``)."""
    warnings.filterwarnings("ignore", module="dagster")
    defs = build_definitions(settings=Settings())  # names only: no setting changes them
    keys = {k for job in (CLUSTER_JOB, FLEET_JOB) for k in defs.resolve_job_def(job).asset_layer.selected_asset_keys}
    return sorted({k.path[-1] for k in keys} | {k.to_user_string() for k in keys if len(k.path) > 1})


def _cluster_tables(selection: list[str] | None) -> list[str] | None:
    """The tables whose cluster-day parts a run of ``selection`` rewrites (None: every table); a
    full key (``fleet/swing_stats``) names a fleet-day asset, which has no cluster parts."""
    return None if not selection else [name for name in selection if "/" not in name]


def _select(job, selection: list[str] | None):
    """The job's asset keys named in ``selection``: by name (``swing_stats``: the cluster-days'
    and the fleet-day's) or by full key (``fleet/swing_stats``: the fleet-day's only)."""
    if not selection:
        return None
    wanted = set(selection)
    return [k for k in job.asset_layer.selected_asset_keys if k.path[-1] in wanted or k.to_user_string() in wanted]


def _merge(outcome: RunOutcome, part: dict) -> None:
    outcome.success = outcome.success and part["success"]
    if part["run_id"] and part["cluster"]:
        outcome.cluster_days += 1
    elif part["run_id"]:
        outcome.fleet_day_ran = True
    if part["run_id"]:
        outcome.run_id = f"{outcome.run_id}, {part['run_id']}" if outcome.run_id else part["run_id"]
        outcome.run_ids.append(part["run_id"])
    outcome.materialized += part["materialized"]
    outcome.failed_checks += [FailedCheck(**c) for c in part["failed_checks"]]
    for step, seconds in part["step_seconds"].items():
        outcome.step_seconds[step] = outcome.step_seconds.get(step, 0.0) + seconds
    for step, peak in part["step_peak_rss_mb"].items():
        outcome.step_peak_rss_mb[step] = max(outcome.step_peak_rss_mb.get(step, 0.0), peak)
    if part["error"]:
        outcome.error = f"{outcome.error}; {part['error']}" if outcome.error else part["error"]


def _root_cause(event) -> str:
    """The first line of the innermost error of a failed step (the DuckDB or Python error that
    caused it, not Dagster's wrapper)."""
    error = event.step_failure_data.error if event.step_failure_data else None
    if error is None:
        return event.message or "failed"
    while error.cause is not None:
        error = error.cause
    lines = [line.strip() for line in error.message.splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else error.cls_name or "failed"
