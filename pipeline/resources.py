"""Dagster resources: the warehouse (data dir + DuckDB compute connections + catalog publishing)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import duckdb
from dagster import ConfigurableResource

from collectors.contract import DATASETS, SchemaError, check_file_schema
from pipeline import warehouse
from pipeline.constants import resolve_data_dir


class WarehouseResource(ConfigurableResource):
    """Where the data lives and how assets get a DuckDB connection over it.

    ``data_dir`` empty means $WATTLINE_DATA_DIR, else ./data (resolved when used, so the
    same definitions serve the CLI, the UI and the tests).
    """

    data_dir: str = ""

    @property
    def path(self) -> Path:
        return resolve_data_dir(self.data_dir or None)

    def raw_files(self, dataset: str, date: str) -> tuple[list[Path], dict[str, str]]:
        """The day's files of ``dataset`` that follow the contract, and the rejected ones with why."""
        good, bad = [], {}
        for path in warehouse.raw_files(self.path, dataset, date):
            try:
                check_file_schema(path, DATASETS[dataset].schema)
                good.append(path)
            except SchemaError as exc:
                bad[str(path)] = str(exc).removeprefix(f"{path}: ")
        return good, bad

    @contextlib.contextmanager
    def connection(self, date: str | None = None, raw_files: dict[str, list[Path]] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        with warehouse.compute_connection(self.path, date, raw_overrides=raw_files) as con:
            yield con

    def write_partition(self, con: duckdb.DuckDBPyConnection, table: str, date: str, query: str) -> int:
        """Replace the day's partition of ``table`` and republish the catalog; returns rows written."""
        rows = warehouse.write_partition(con, self.path, table, date, query)
        warehouse.publish(self.path)
        return rows
