"""Paths and names shared by the pipeline, the CLI and the reports: one place to change them."""

from __future__ import annotations

from pathlib import Path

from collectors.days import FIRST_DAY

REPO_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = REPO_ROOT / "sql"
REPO_DAGSTER_YAML = REPO_ROOT / "dagster.yaml"

WAREHOUSE_FILE = "warehouse.duckdb"
DERIVED_DIR = "derived"
DAGSTER_HOME_DIR = ".dagster"
REPORTS_DIR = REPO_ROOT / "reports" / "out"

DATE_DIM = "date"
CLUSTER_DIM = "cluster"
"""The two dimensions of a cluster-day partition (pipeline/partitions.py)."""

START_DATE = FIRST_DAY
"""First day of the daily partitions (earlier data cannot be materialized): ``collectors/days.py``."""

DIURNAL_TRAILING_DAYS = 28
"""Days of hourly_activity that diurnal_profile reads by default (and that an S3 fleet-day stages)."""


def warehouse_path(data_dir: Path) -> Path:
    return data_dir / WAREHOUSE_FILE


def derived_path(data_dir: Path, table: str) -> Path:
    return data_dir / DERIVED_DIR / table


PART_ROW_GROUP_ROWS = 500_000
"""Rows per row group of every derived part, whoever writes it (DuckDB's COPY, the series engine,
a Python table's writer)."""
PART_PAGE_ROWS = 1 << 20
"""Rows a data page of a part pyarrow writes may hold (pages still end at pyarrow's data page size):
pyarrow's default of 20 000 rows cuts a float column into pages too short for zstd to find its
repeats."""
