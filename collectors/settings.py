"""Wattline's settings: every environment variable a deployment sets, read in this one module.

Core (imports nothing of ours). :func:`load` reads them all at once into a :class:`Settings`, a
plain value. It is called where work starts (a CLI command, the Dagster code location in
pipeline/definitions.py, ``runner.run_day``, a reader's connection) and the value travels from
there as typed arguments and resource fields: a run's worker processes get theirs as an argument,
and no code below an entry point reads the environment or a DuckDB variable back for them.
Nothing else in the code base reads ``os.environ`` for these names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DATA_DIR_ENV = "WATTLINE_DATA_DIR"
"""The data dir: a local folder or ``s3://bucket/prefix`` (default ./data)."""
DEFAULT_DATA_DIR = "data"
DUCKDB_MEMORY_ENV = "WATTLINE_DUCKDB_MEMORY"
"""Memory bound of the compute connections (DuckDB size, e.g. ``2GB``); default: a quarter of RAM, at most 2 GiB."""
DUCKDB_THREADS_ENV = "WATTLINE_DUCKDB_THREADS"
"""DuckDB threads per compute connection (default: all cores; the runner splits them among workers)."""
WORKERS_ENV = "WATTLINE_WORKERS"
"""Cluster-day worker processes of ``wattline run`` (default: cores, clusters and memory decide)."""
WORK_DIR_ENV = "WATTLINE_WORK_DIR"
"""Local work dir of an S3 data dir (default ``<state dir>/work``: docs/storage.md)."""
STATE_DIR_ENV = "WATTLINE_STATE_DIR"
"""Local folder for the state of an S3 data dir (locks, ``--follow`` checkpoints)."""
REPORTS_DIR_ENV = "WATTLINE_REPORTS_DIR"
"""Where the daily report is written (default: the repo's reports/out)."""
REPORT_PNG_ENV = "WATTLINE_REPORT_PNG"
"""``off`` skips the report's PNG files (the HTML is still written)."""
AUTOMATION_ENV = "WATTLINE_AUTOMATION"
"""``off`` starts the schedule and the sensors stopped (they can still be started in the UI)."""
SCHEDULE_HOUR_ENV = "WATTLINE_SCHEDULE_HOUR"
"""UTC hour of the daily schedule (minute 15; default 1)."""
SIM_WORKERS_ENV = "WATTLINE_SIM_WORKERS"
"""Processes of `wattline simulate` (default: at most 2)."""
GRID_STEP_MS_ENV = "WATTLINE_GRID_STEP_MS"
"""Step (ms) of the common grid the host, cluster, role and fleet swings are taken on (default 100;
a divisor of 1000 from 10 to 1000: :data:`GRID_STEPS_MS`)."""
DEFAULT_GRID_STEP_MS = 100
GRID_STEPS_MS = tuple(s for s in range(10, 1001) if 1000 % s == 0)
"""Allowed grid steps: a whole number of slots per second, so every window of 1, 2, 10 and 60 s is
a whole number of slots and the aligned windows start on the day's seconds."""
MAX_FILE_ROWS_ENV = "WATTLINE_MAX_FILE_ROWS"
"""Most rows one raw Parquet file may hold (default :data:`DEFAULT_MAX_FILE_ROWS`): checked from the
footer before a file is read, so a file over it is quarantined with this reason instead of being
read whole (``wattline check`` says the same)."""
DEFAULT_MAX_FILE_ROWS = 50_000_000
"""Well above every real file: a collector hour-file of 8 GPUs at ~60 rows/s/GPU is ~1.7 M rows, an
nvidia-smi or DCGM import of a day of 8 GPUs at 10 Hz ~7 M; a few GB of memory at most to convert
one. A 10**9-row file (37 MB of constant row groups) would otherwise take > 6 GB RSS."""
FIRST_DAY_ENV = "WATTLINE_FIRST_DAY"
"""First day of the Dagster daily partitions: ``YYYY-MM-DD``, or ``data`` (the first day with raw
files in the data dir; what ``wattline ui`` uses unless this is set); unset: the whole range the
pipeline runs (collectors/days.py)."""
LOG_LEVEL_ENV = "WATTLINE_LOG_LEVEL"
"""Dagster's console log level in ``wattline run`` (default CRITICAL: the CLI prints its own summary)."""
CAP_FACTORS_ENV = "WATTLINE_CAP_FACTORS"
"""``power_cap_whatif``'s candidate caps, fractions of each GPU's enforced limit (``1.0,0.9,0.8``;
default 1.0,0.9,0.8,0.7,0.6): what ``wattline run --cap-factors`` sets; a Dagster run config's
``cap_factors`` takes precedence."""
CAP_ALPHA_ENV = "WATTLINE_CAP_ALPHA"
"""``power_cap_whatif``'s α per GPU model, overriding the built-in ones (``H100=0.3:0.2:0.45,A100=0.2``):
what ``wattline run --cap-alpha`` sets; a Dagster run config's ``alpha`` takes precedence."""

JOB_EVENTS_LOOKBACK_DAYS_ENV = "WATTLINE_JOB_EVENTS_LOOKBACK_DAYS"
"""How many earlier days' job_events a day reads for events still running into it (default
:data:`DEFAULT_JOB_EVENTS_LOOKBACK_DAYS`): a job_events file goes by the day its event starts, so an
event (or a row marking a whole run) that started up to this many days before still holds its GPUs
and adds its part of the energy on the day; one that started earlier is not seen."""
DEFAULT_JOB_EVENTS_LOOKBACK_DAYS = 7

_OFF = ("off", "0", "false", "no")


DEFAULT_SCHEDULE_HOUR = 1
DEFAULT_LOG_LEVEL = "CRITICAL"


@dataclass(frozen=True)
class Settings:
    """Every setting of a deployment as one value; ``Settings()`` holds the defaults."""

    data_dir: str = DEFAULT_DATA_DIR
    duckdb_memory: str | None = None
    """None: the default bound (pipeline.warehouse.default_memory_mb)."""
    duckdb_threads: int | None = None
    """None: DuckDB's default, every core."""
    workers: int | None = None
    work_dir: str | None = None
    state_dir: str | None = None
    reports_dir: str | None = None
    report_png: bool = True
    automation: bool = True
    schedule_hour: int = DEFAULT_SCHEDULE_HOUR
    log_level: str = DEFAULT_LOG_LEVEL
    sim_workers: int | None = None
    grid_step_ms: int = DEFAULT_GRID_STEP_MS
    first_day: str | None = None
    max_file_rows: int = DEFAULT_MAX_FILE_ROWS
    cap_factors: str | None = None
    """The text of WATTLINE_CAP_FACTORS, checked where it is used (pipeline.power_caps)."""
    cap_alpha: str | None = None
    """The text of WATTLINE_CAP_ALPHA, checked where it is used (pipeline.power_caps)."""
    job_events_lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS


def max_file_rows(value: str | int | None) -> int:
    """The per-file row budget from a setting's text; a clear error for anything but a positive integer."""
    if value is None or value == "":
        return DEFAULT_MAX_FILE_ROWS
    try:
        rows = int(str(value).strip().replace("_", ""))
    except ValueError:
        rows = 0
    if rows <= 0:
        raise ValueError(f"{MAX_FILE_ROWS_ENV}={value!r}: expected a positive number of rows (default {DEFAULT_MAX_FILE_ROWS})")
    return rows


def job_events_lookback_days(value: str | int | None) -> int:
    """Days of earlier job_events a day reads, from a setting's text; a clear error for anything but 0–366."""
    if value is None or value == "":
        return DEFAULT_JOB_EVENTS_LOOKBACK_DAYS
    try:
        days = int(str(value).strip())
    except ValueError:
        days = -1
    if not 0 <= days <= 366:
        raise ValueError(f"{JOB_EVENTS_LOOKBACK_DAYS_ENV}={value!r}: expected a whole number of days from 0 to 366 "
                         f"(default {DEFAULT_JOB_EVENTS_LOOKBACK_DAYS})")
    return days


def grid_step_ms(value: str | int | None) -> int:
    """The grid step in ms from a setting's text; a clear error for anything not allowed."""
    if value is None or value == "":
        return DEFAULT_GRID_STEP_MS
    try:
        step = int(str(value).strip())
    except ValueError:
        step = 0
    if step not in GRID_STEPS_MS:
        raise ValueError(
            f"{GRID_STEP_MS_ENV}={value!r}: the grid step must be a whole number of ms dividing 1000, "
            f"one of {', '.join(map(str, GRID_STEPS_MS))}"
        )
    return step


def load() -> Settings:
    """The settings as the environment holds them now."""
    env = os.environ.get
    return Settings(
        data_dir=env(DATA_DIR_ENV) or DEFAULT_DATA_DIR,
        duckdb_memory=env(DUCKDB_MEMORY_ENV) or None,
        duckdb_threads=int(env(DUCKDB_THREADS_ENV) or 0) or None,
        workers=int(env(WORKERS_ENV) or 0) or None,
        work_dir=env(WORK_DIR_ENV) or None,
        state_dir=env(STATE_DIR_ENV) or None,
        reports_dir=env(REPORTS_DIR_ENV) or None,
        report_png=env(REPORT_PNG_ENV, "on").lower() not in _OFF,
        automation=env(AUTOMATION_ENV, "on").lower() != "off",
        schedule_hour=int(env(SCHEDULE_HOUR_ENV) or DEFAULT_SCHEDULE_HOUR),
        log_level=env(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL,
        sim_workers=int(env(SIM_WORKERS_ENV) or 0) or None,
        grid_step_ms=grid_step_ms(env(GRID_STEP_MS_ENV)),
        max_file_rows=max_file_rows(env(MAX_FILE_ROWS_ENV)),
        first_day=(env(FIRST_DAY_ENV) or "").strip() or None,
        cap_factors=(env(CAP_FACTORS_ENV) or "").strip() or None,
        cap_alpha=(env(CAP_ALPHA_ENV) or "").strip() or None,
        job_events_lookback_days=job_events_lookback_days(env(JOB_EVENTS_LOOKBACK_DAYS_ENV)),
    )
