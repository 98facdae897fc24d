"""Paths and names shared by the pipeline, the CLI and the reports: one place to change them."""

from __future__ import annotations

import os
from pathlib import Path

from collectors.days import FIRST_DAY
from collectors.inventory import INVENTORY_FILE  # noqa: F401 (re-exported: one name for the file)

REPO_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = REPO_ROOT / "sql"
REPO_DAGSTER_YAML = REPO_ROOT / "dagster.yaml"

DATA_DIR_ENV = "WATTLINE_DATA_DIR"
DEFAULT_DATA_DIR = "data"

WAREHOUSE_FILE = "warehouse.duckdb"
DERIVED_DIR = "derived"
QUARANTINE_DIR = "quarantine"
DAGSTER_HOME_DIR = ".dagster"
REPORTS_DIR = REPO_ROOT / "reports" / "out"

DATE_DIM = "date"
CLUSTER_DIM = "cluster"
"""The two dimensions of a cluster-day partition (pipeline/partitions.py)."""

START_DATE = FIRST_DAY
"""First day of the daily partitions (earlier data cannot be materialized): ``collectors/days.py``."""


def resolve_data_dir(value: str | os.PathLike | None = None) -> Path:
    """The data dir: an explicit value, else $WATTLINE_DATA_DIR, else ./data; always absolute."""
    raw = value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(raw).expanduser().resolve()


def warehouse_path(data_dir: Path) -> Path:
    return data_dir / WAREHOUSE_FILE


def derived_path(data_dir: Path, table: str) -> Path:
    return data_dir / DERIVED_DIR / table
