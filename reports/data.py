"""What the report reads: warehouse tables through the read-only connection, the Dagster
instance's check results and materializations, and the quarantine folder.

Everything here degrades to "not available": a table that does not exist yet (or lacks a
column the report needs) is reported as missing, never raised.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from collectors.contract import QUARANTINE_DIR
from pipeline.constants import CLUSTER_DIM, DAGSTER_HOME_DIR, DERIVED_DIR
from pipeline.partitions import cluster_day_key
from pipeline.readonly import ReadOnlyError, connect_readonly
from pipeline.sqltext import literal, pattern_literal

quote = literal  # the pipeline's one quoting helper


class Reader:
    """Read-only queries on ``warehouse.duckdb`` (the same connection as ``wattline sql``)."""

    def __init__(self, data_dir: Path, con: duckdb.DuckDBPyConnection | None):
        self.data_dir = data_dir
        self.con = con
        self._columns: dict[str, set[str]] = {}
        if con is not None:
            rows = con.sql(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
            ).to_arrow_table().to_pylist()
            for table, column in ((r["table_name"], r["column_name"]) for r in rows):
                self._columns.setdefault(table, set()).add(column)

    @classmethod
    def open(cls, data_dir: Path) -> Reader:
        try:
            return cls(data_dir, connect_readonly(data_dir))
        except (ReadOnlyError, duckdb.Error):
            return cls(data_dir, None)

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def tables(self) -> set[str]:
        return set(self._columns)

    def columns(self, table: str) -> set[str]:
        return self._columns.get(table, set())

    def missing(self, table: str, columns: tuple[str, ...] | list[str] = ()) -> str | None:
        """Why ``table`` cannot be used (None when it exists with ``columns``)."""
        if table not in self._columns:
            return f"`{table}` not available yet"
        lacking = [c for c in columns if c not in self._columns[table]]
        if lacking:
            return f"`{table}` lacks column(s) {', '.join(lacking)}"
        return None

    def has(self, table: str, columns: tuple[str, ...] | list[str] = ()) -> bool:
        return self.missing(table, columns) is None

    def q(self, sql: str) -> pa.Table:
        assert self.con is not None
        return self.con.sql(sql).to_arrow_table()

    def rows(self, sql: str) -> list[dict]:
        """Rows as dicts; DECIMAL values (DuckDB's sums of integers) come back as floats."""
        return self.rows_of(self.q(sql))

    def one(self, sql: str) -> tuple:
        """The first row as a tuple (Nones when the query returns no row)."""
        table = self.q(sql)
        if table.num_rows == 0:
            return tuple(None for _ in table.column_names)
        return tuple(self.rows_of(table)[0].values())

    @staticmethod
    def rows_of(table: pa.Table) -> list[dict]:
        return [{k: float(v) if isinstance(v, decimal.Decimal) else v for k, v in row.items()} for row in table.to_pylist()]

    def day_relation(self, table: str, date: str) -> str:
        """A FROM-able relation of ``table``'s rows for ``date``.

        Tables with a ``date`` column are filtered on it; a table without one (e.g.
        ``diurnal_profile``, whose rows summarize trailing days) is read from its
        ``date=D`` partition folder, and if it has none, every row is used.
        """
        if "date" in self.columns(table):
            return f"(SELECT * FROM {table} WHERE date = DATE {quote(date)})"
        folder = self.data_dir / DERIVED_DIR / table / f"date={date}"
        if any(folder.rglob("*.parquet")):
            return f"read_parquet({pattern_literal(folder, '**/*.parquet')})"
        return table


# --- Dagster instance: check results and materializations of a partition ----------------------


@dataclass
class CheckRow:
    asset: str
    check: str
    passed: bool
    severity: str
    description: str
    run_id: str
    timestamp: float


@dataclass
class MaterializationRow:
    asset: str
    timestamp: float
    run_id: str
    rows: int | None


@dataclass
class RunHistory:
    available: bool
    note: str = ""
    checks: list[CheckRow] = field(default_factory=list)
    materializations: list[MaterializationRow] = field(default_factory=list)


def _dagster_home(data_dir: Path) -> Path:
    return data_dir / DAGSTER_HOME_DIR


def run_history(data_dir: Path, date: str, instance=None, assets: list[str] | None = None) -> RunHistory:
    """The latest result of every asset check and materialization for partition ``date``.

    ``instance`` is the running job's instance when the report is an asset; otherwise the
    one at ``<data-dir>/.dagster`` (none there: the history is reported as not available).
    """
    if instance is not None:
        return _history_from(instance, date, assets)
    home = _dagster_home(data_dir)
    if not (home / "dagster.yaml").exists():
        return RunHistory(False, f"no Dagster instance at {home} (no `wattline run` for this data dir yet)")
    from dagster import DagsterInstance

    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with DagsterInstance.get() as inst:
            return _history_from(inst, date, assets)
    except Exception as exc:  # an unreadable instance must not stop the report
        return RunHistory(False, f"Dagster instance at {home} could not be read: {type(exc).__name__}: {exc}")
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous


def _history_from(instance, date: str, assets: list[str] | None) -> RunHistory:
    from dagster import AssetKey, DagsterEventType, RunsFilter

    history = RunHistory(True)
    # the fleet-day's runs (partition D) and the cluster-days' (partition date D, any cluster)
    records = instance.get_run_records(RunsFilter(tags={"dagster/partition": date}), limit=50)
    records += instance.get_run_records(RunsFilter(tags={"dagster/partition/date": date}), limit=500)
    runs = [r.dagster_run for r in sorted(records, key=lambda r: r.create_timestamp, reverse=True)]
    seen: set[tuple[str, str]] = set()
    for run in runs:  # newest first
        cluster = run.tags.get("dagster/partition/cluster")
        for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
            ev = entry.dagster_event.event_specific_data
            asset = ev.asset_key.to_user_string()
            key = (f"{asset} [{cluster}]" if cluster else asset, ev.check_name)
            if key in seen:
                continue
            seen.add(key)
            history.checks.append(
                CheckRow(
                    asset=key[0],
                    check=key[1],
                    passed=bool(ev.passed),
                    severity=ev.severity.value if ev.severity is not None else "ERROR",
                    description=ev.description or "",
                    run_id=run.run_id,
                    timestamp=entry.timestamp,
                )
            )
    history.checks.sort(key=lambda c: (c.passed, c.severity != "ERROR", c.asset, c.check))
    keys = [AssetKey.from_user_string(a) for a in assets] if assets is not None else sorted(
        instance.get_asset_keys(), key=lambda k: k.to_user_string()
    )
    partitions = [(date, None)] + [(cluster_day_key(date, c), c) for c in instance.get_dynamic_partitions(CLUSTER_DIM)]
    for key in keys:
        latest = _latest_materializations(instance, key, [p for p, _ in partitions])
        for partition, cluster in partitions:
            if (record := latest.get(partition)) is None:
                continue
            mat = record.asset_materialization
            rows = None
            if mat is not None and "dagster/row_count" in mat.metadata:
                rows = int(mat.metadata["dagster/row_count"].value)
            label = f"{key.to_user_string()} [{cluster}]" if cluster else key.to_user_string()
            history.materializations.append(MaterializationRow(label, record.timestamp, record.run_id, rows))
    if not runs:
        history.note = f"no Dagster run recorded for {date}"
    return history


def _latest_materializations(instance, key, partitions: list[str], batch: int = 100) -> dict:
    """The newest materialization record of ``key`` in each of ``partitions`` that has one: one
    query for all of them (newest first), then one per partition the first ``batch`` records
    did not reach."""
    from dagster import AssetRecordsFilter

    result = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=partitions), limit=batch)
    latest: dict = {}
    for record in result.records:
        latest.setdefault(record.partition_key, record)
    if result.has_more:
        for partition in partitions:
            if partition not in latest:
                rest = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1)
                if rest.records:
                    latest[partition] = rest.records[0]
    return latest


def fmt_ts(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- quarantine ---------------------------------------------------------------------------


@dataclass
class QuarantineSummary:
    by_dataset: dict[str, int]
    reasons: list[tuple[str, str, int]]  # dataset, reason, rows


def quarantine(data_dir: Path, date: str) -> QuarantineSummary:
    """Rows set aside by ingestion for ``date`` (``<data-dir>/quarantine/<dataset>/date=D/``)."""
    root = data_dir / QUARANTINE_DIR
    by_dataset: dict[str, int] = {}
    reasons: dict[tuple[str, str], int] = {}
    if root.is_dir():
        for folder in sorted(root.glob(f"*/date={date}")):  # quarantine/<dataset>/date=D/ (not files/, file_log/)
            files = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith("."))
            if not files:
                continue
            dataset = folder.parent.name
            try:
                ds = pads.dataset(files, format="parquet")
                by_dataset[dataset] = by_dataset.get(dataset, 0) + ds.count_rows()
                if "reason" in ds.schema.names:
                    counts = ds.to_table(columns=["reason"]).column("reason").value_counts()
                    for item in counts.to_pylist():
                        reason = str(item["values"]).split(":")[0][:120]
                        reasons[(dataset, reason)] = reasons.get((dataset, reason), 0) + item["counts"]
            except Exception as exc:  # a damaged quarantine file is itself worth reporting
                reasons[(dataset, f"unreadable quarantine file(s): {exc}")] = 0
    top = sorted(((d, r, n) for (d, r), n in reasons.items()), key=lambda x: -x[2])[:10]
    return QuarantineSummary(by_dataset, top)
