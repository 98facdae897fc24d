"""Materialize one day through Dagster's Python API: the same job, instance and asset code as the UI.

Runs go into the Dagster instance at ``<data-dir>/.dagster`` (``DAGSTER_HOME``; its
``dagster.yaml`` is the repo's), so `wattline run` and `wattline ui` show the same history.
Two runs on one data dir serialize on a file lock instead of fighting over files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.constants import DAGSTER_HOME_DIR, REPO_DAGSTER_YAML


@dataclass
class FailedCheck:
    asset: str
    check: str
    severity: str
    description: str


@dataclass
class RunOutcome:
    date: str
    success: bool
    run_id: str
    materialized: list[str] = field(default_factory=list)
    failed_checks: list[FailedCheck] = field(default_factory=list)
    error: str | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    quarantined: list[dict] = field(default_factory=list)
    """The day's files still in quarantine (every dataset, including ones no check covers yet)."""

    @property
    def error_checks(self) -> list[FailedCheck]:
        return [c for c in self.failed_checks if c.severity == "ERROR"]

    @property
    def ok(self) -> bool:
        return self.success and not self.error_checks


def dagster_home(data_dir: Path) -> Path:
    """``<data-dir>/.dagster`` holding a copy of the repo's dagster.yaml (refreshed if it changed)."""
    home = data_dir / DAGSTER_HOME_DIR
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
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".run.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another run on {data_dir} to finish...", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_day(data_dir: Path, date: str, *, selection: list[str] | None = None) -> RunOutcome:
    """Run ``daily_job`` (or just ``selection``'s assets) for partition ``date``."""
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_dir))
    warnings.filterwarnings("ignore", module="dagster")
    from dagster import AssetKey, DagsterInstance

    from pipeline.definitions import build_definitions

    defs = build_definitions(str(data_dir))
    job = defs.resolve_job_def("daily_job")
    from pipeline.warehouse import remove_stale_tmp

    with run_lock(data_dir), DagsterInstance.get() as instance:
        remove_stale_tmp(data_dir)
        result = job.execute_in_process(
            partition_key=date,
            instance=instance,
            raise_on_error=False,
            # Dagster's console logger prints stack traces for failed steps: the CLI reports
            # failures and quarantined files itself in one line each; the UI keeps the details.
            run_config={"loggers": {"console": {"config": {"log_level": os.environ.get("WATTLINE_LOG_LEVEL", "CRITICAL")}}}},
            asset_selection=[AssetKey(a) for a in selection] if selection else None,
        )
    from pipeline import quarantine

    outcome = RunOutcome(date=date, success=result.success, run_id=result.run_id, quarantined=quarantine.entries(data_dir, date))
    for event in result.all_events:
        if event.is_step_success and event.step_key:
            outcome.step_seconds[event.step_key] = event.event_specific_data.duration_ms / 1000
    for event in result.get_asset_materialization_events():
        outcome.materialized.append(event.asset_key.to_user_string())
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            outcome.failed_checks.append(
                FailedCheck(
                    asset=evaluation.asset_key.to_user_string(),
                    check=evaluation.check_name,
                    severity=evaluation.severity.value,
                    description=evaluation.description or "",
                )
            )
    if not result.success:
        failures = [e for e in result.all_events if e.is_failure and e.step_key]
        outcome.error = "; ".join(f"{e.step_key}: {_root_cause(e)}" for e in failures) or "run failed"
    return outcome


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
