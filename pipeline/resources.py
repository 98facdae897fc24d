"""Dagster resources: the warehouse (data dir + DuckDB compute connections + catalog publishing)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
from dagster import ConfigurableResource
from pydantic import field_validator

from collectors import settings as settings_mod
from collectors.contract import DATASETS
from collectors.settings import DEFAULT_GRID_STEP_MS, DEFAULT_JOB_EVENTS_LOOKBACK_DAYS, Settings
from collectors.storage import DataRoot, resolve_data_root
from pipeline import file_quarantine, remote, warehouse
from pipeline.constants import REPORTS_DIR
from pipeline.datadir import host_filter, host_of, link_reason, linked_paths, load_inventory_if_any, scope_host_filter
from pipeline.scope import UNASSIGNED, Scope


def reports_dir(settings: Settings) -> Path:
    """Where the report goes: the settings' folder, made absolute against the working dir of the
    entry point that resolves it, else the repo's ``reports/out``."""
    return Path(settings.reports_dir).expanduser().resolve() if settings.reports_dir else REPORTS_DIR


class WarehouseResource(ConfigurableResource):
    """Where the data lives and how assets get a DuckDB connection over it.

    Its fields are the run's settings as the entry point resolved them (:func:`from_settings`:
    pipeline/definitions.py for the UI and the daemon, the runner for `wattline run`); nothing
    below reads the environment for them.
    """

    data_dir: str
    """The data dir: a local folder or an ``s3://bucket/prefix`` URL."""
    duckdb_memory: str = ""
    """Memory bound of each compute connection (e.g. ``2GB``); empty: the default bound, a
    quarter of RAM capped at 2 GiB (pipeline.warehouse.default_memory_mb)."""
    duckdb_threads: int = 0
    """DuckDB threads per compute connection; 0: all cores."""
    grid_step_ms: int = DEFAULT_GRID_STEP_MS
    """Step (ms) of the common grid the host-and-above swings use, a divisor of 1000 from 10 to
    1000. The tables on the grid get it as an argument and their SQL as the DuckDB variable
    ``grid_step_ms`` (pipeline.tables.Table.grid_step)."""
    job_events_lookback_days: int = DEFAULT_JOB_EVENTS_LOOKBACK_DAYS
    """How many earlier days' job_events a day reads for events still running into it."""
    cap_factors: str = ""
    """power_cap_whatif's candidate caps (the run config's ``cap_factors`` comes first); empty: the defaults."""
    cap_alpha: str = ""
    """power_cap_whatif's α per GPU model (the run config's ``alpha`` comes first); empty: the built-in ones."""
    reports_dir: str = str(REPORTS_DIR)
    """Where the daily report asset writes the report (an absolute path: :func:`reports_dir`)."""
    report_png: bool = True
    """Whether the daily report asset writes a PNG per chart."""

    @field_validator("grid_step_ms")
    @classmethod
    def _grid_step(cls, value: int) -> int:
        return settings_mod.grid_step_ms(value)

    @field_validator("job_events_lookback_days")
    @classmethod
    def _lookback(cls, value: int) -> int:
        return settings_mod.job_events_lookback_days(value)

    @classmethod
    def from_settings(cls, settings: Settings, data_dir: remote.DataDir | None = None) -> WarehouseResource:
        """The resource for a run with these settings; ``data_dir``: the data dir given (a CLI
        flag), else the settings'."""
        return cls(
            data_dir=str(resolve_data_root(data_dir or settings.data_dir)),
            duckdb_memory=settings.duckdb_memory or "",
            duckdb_threads=settings.duckdb_threads or 0,
            grid_step_ms=settings.grid_step_ms,
            job_events_lookback_days=settings.job_events_lookback_days,
            cap_factors=settings.cap_factors or "",
            cap_alpha=settings.cap_alpha or "",
            reports_dir=str(reports_dir(settings)),
            report_png=settings.report_png,
        )

    @property
    def root(self) -> DataRoot:
        """The data dir: a local folder, or an ``s3://bucket/prefix`` (pipeline/remote.py)."""
        return remote.open_root(self.data_dir)

    @property
    def path(self) -> Path:
        """The local directory DuckDB works in: the data dir itself, or an S3 root's work dir."""
        return remote.work_dir(self.root)

    def raw_files(self, dataset: str, date: str) -> tuple[list[Path], dict[str, str]]:
        """The day's usable files of ``dataset``, and {path: reason} of its files in quarantine
        that lose data (unreadable or drifted; byte-identical copies are not listed).

        Every raw dataset goes through here (see :meth:`connection`), so requests and
        job_events files are validated and quarantined exactly like power files.
        """
        return file_quarantine.usable_files(self.path, dataset, date), self.rejected_files(dataset, date)

    def rejected_files(self, dataset: str, date: str | Scope) -> dict[str, str]:
        """{path: reason} of the day's files in quarantine that lose data (not byte-identical
        copies) and of the symbolic links that are not read; for a cluster-day's power, only its
        hosts' files."""
        scope = date if isinstance(date, Scope) else Scope(date=date)
        mine = scope_host_filter(self.path, scope) if dataset == "power" else (lambda host: True)
        rejected = {
            e["path"]: f"{e['reason']} (moved to {e['quarantined_path']})"
            for e in file_quarantine.entries(self.path, scope.date, dataset)
            if e["kind"] in file_quarantine.LOSSES and mine(host_of(Path(e["path"])))
        }
        # Symbolic links are not read (nor moved): named while they are there, by the cluster-day
        # of their host; one above the host folders (power/, date=D) or of a host no cluster
        # lists (its cluster-day does not run without files) by every cluster-day.
        unlisted = host_filter(load_inventory_if_any(self.path), UNASSIGNED)
        for link, target in linked_paths(self.path, dataset, scope.date).items():
            host = host_of(link)
            if host is None or mine(host) or unlisted(host):
                rejected[str(link)] = link_reason(target)
        return rejected

    def converted_files(self, date: Scope) -> dict[str, str]:
        """{path: what was converted} of the day's files of every dataset accepted with lossless
        casts whose original is still kept; for a cluster-day, only its hosts' power files."""
        mine = scope_host_filter(self.path, date)
        return {
            e["path"]: e["reason"].removeprefix("accepted with casts: ")
            for e in file_quarantine.entries(self.path, date.date)
            if e["kind"] == "converted" and (e["dataset"] != "power" or mine(host_of(Path(e["path"]))))
        }

    def scoped_files(self, date: str, scope: Scope | None) -> dict[str, list[Path]]:
        """The day's usable files of every raw dataset; a cluster-day's power files are its hosts'."""
        files = {name: file_quarantine.usable_files(self.path, name, date) for name in DATASETS}
        if scope is not None and scope.fleet:
            files["power"] = []
        elif scope is not None and scope.cluster:
            mine = scope_host_filter(self.path, scope)
            files["power"] = [f for f in files["power"] if mine(host_of(f))]
        return files

    @contextlib.contextmanager
    def connection(
        self, date: str | Scope | None = None, raw_files: dict[str, list[Path]] | None = None, *, share: str | None = None,
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A compute connection; with a ``date`` (or a cluster-day / fleet-day :class:`Scope`),
        each raw dataset's view holds only that day's usable files (unless ``raw_files`` names
        them), so no asset reads an unchecked file. ``share``: a run's id, whose steps of one
        scope share the views and macros (``warehouse.shared_compute_connection``)."""
        scope = date if isinstance(date, Scope) else None
        day = date.date if isinstance(date, Scope) else date
        remote.stage(self.root, self.path, scope or day, self.job_events_lookback_days)  # S3: the working copy (no-op locally)
        overrides = dict(raw_files or {})
        if day is not None:
            for name, files in self.scoped_files(day, scope).items():
                overrides.setdefault(name, files)
        memory, threads, lookback = self.duckdb_memory or None, self.duckdb_threads or None, self.job_events_lookback_days
        if share is not None and scope is not None:
            with warehouse.shared_compute_connection(
                share, self.path, scope.date, overrides, scope, memory=memory, threads=threads, lookback_days=lookback,
            ) as con:
                yield con
            return
        with warehouse.compute_connection(
            self.path, day, raw_overrides=overrides, scope=scope, memory=memory, threads=threads, lookback_days=lookback,
        ) as con:
            yield con

    def write_and_publish(self, con: duckdb.DuckDBPyConnection, table: str, date: str | Scope, query: str) -> int:
        """Replace the day's (or cluster-day's) part of ``table`` and republish the catalog;
        returns rows written."""
        scope = date if isinstance(date, Scope) else Scope(date=date)
        try:
            rows = warehouse.write_partition(con, self.path, table, scope.date, query, scope)
        except duckdb.Error:
            if not self.quarantine_damaged(con, scope):
                raise
            rows = warehouse.write_partition(con, self.path, table, scope.date, query, scope)
        self.publish_part(table, scope)
        return rows

    def write_rows_and_publish(self, con: duckdb.DuckDBPyConnection, table: str, scope: Scope, rows: Callable[[], pa.RecordBatchReader]) -> int:
        """Replace ``scope``'s part of a Python table with the stream ``rows()`` returns
        (warehouse.write_rows_partition) and republish the catalog; returns rows written. A raw file
        found damaged on the way is quarantined and the rows computed once more (a fresh stream)."""
        try:
            written = warehouse.write_rows_partition(con, self.path, table, scope, rows())
        except (duckdb.Error, OSError, pa.ArrowException):  # DuckDB's errors can come through the Arrow stream as OSError
            if not self.quarantine_damaged(con, scope):
                raise
            written = warehouse.write_rows_partition(con, self.path, table, scope, rows())
        self.publish_part(table, scope)
        return written

    def quarantine_damaged(self, con: duckdb.DuckDBPyConnection, scope: Scope) -> bool:
        """After a read failed: a file whose footer is sound but whose data is damaged fails the
        query, not the footer check. Quarantine such files and redefine ``con``'s views without
        them (the caller computes the rest of the day once more); False when none was found."""
        if not sum(file_quarantine.quarantine_damaged(self.path, name, scope.date) for name in DATASETS):
            return False
        warehouse.create_views(con, self.path, raw_overrides=self.scoped_files(scope.date, scope), scope=scope if scope.cluster or scope.fleet else None,
                               lookback_days=self.job_events_lookback_days)
        return True

    def publish_part(self, table: str, scope: Scope) -> None:
        """Publish ``table``'s part for ``scope`` (S3: upload it) and bring the catalog up to date
        (only a table's first part or a change of what else it holds needs a new one)."""
        part = scope.part_dir(self.path, table) / "part-0.parquet"
        remote.publish_part(self.root, self.path, part)
        warehouse.publish_part_to_catalog(self.path, table, part)

