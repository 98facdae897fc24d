"""What one computation sees: a cluster-day, or the fleet-day rolled up from cluster parts.

Every cluster-day asset runs its SQL on a connection where *the fleet is that one cluster*:
the raw datasets hold only the cluster's hosts (power, job_events) and endpoints (requests),
the inventory only its GPUs, and each derived table only the cluster's own part. The SQL is the
same file as for a whole fleet; whatever it computes per host, cluster, endpoint or job is
exact. Its role rows are the cluster's *share* of each role: they are stored as level
``cluster_role`` (entity ``cluster/role``) and its fleet rows (equal to the cluster's) are not
stored. Inside a cluster scope the stored ``cluster_role`` rows read back as ``role`` again, so
a cluster's SQL never sees another cluster. Fleet-day assets roll the parts up (role = sum of
its cluster_role parts, fleet = sum of clusters) and see no raw samples and no per-GPU table.

Parts on disk: ``derived/<table>/date=D/cluster=C/part-0.parquet`` for a cluster-day,
``derived/<table>/date=D/part-0.parquet`` for the fleet-day (see docs/scale-out.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collectors.names import inside
from pipeline.constants import CLUSTER_DIM, DATE_DIM, derived_path
from pipeline.series import SERIES_TABLES, ddl_columns
from pipeline.sqltext import literal

CLUSTER_ROLE = "cluster_role"
UNASSIGNED = "_unassigned"
"""The cluster-day of hosts that have power files but are missing from the inventory."""
PER_GPU_COLUMNS = {t.name: ddl_columns(t) for t in SERIES_TABLES}
"""Per-GPU derived tables and their columns, from the series tables' schemas: a fleet-day sees
them empty (whether or not their files are on this machine), so it provably reads no per-GPU data."""
PER_GPU_TABLES = tuple(PER_GPU_COLUMNS)
PHASE_INTERVALS_COLUMNS = (
    "date DATE, endpoint VARCHAR, start_ts TIMESTAMPTZ, end_ts TIMESTAMPTZ, start_ns BIGINT, end_ns BIGINT, "
    "phase VARCHAR, n_prefill INTEGER, n_decode INTEGER, prefill_estimated BOOLEAN, prompt_tokens DOUBLE, "
    "output_tokens DOUBLE, energy_j DOUBLE, gpus BIGINT, prompt_tokens_per_s DOUBLE, output_tokens_per_s DOUBLE"
)
ALWAYS_DEFINED = {"energy_curve": PER_GPU_COLUMNS["energy_curve"], "phase_intervals": PHASE_INTERVALS_COLUMNS}
"""Derived tables that shared macros or other tables' SQL read, with their columns: defined typed and
empty until built, so those bind on any data dir and return nothing where nothing was built (DuckDB
binds a macro's tables when the macro is created: sql/views/power_energy.sql reads energy_curve;
power_cap_whatif labels its endpoint seconds from phase_intervals). A SQL table's columns here are
held to a built part by tests/test_sql_as_is.py."""


def empty_relation_sql(columns: str) -> str:
    """A typed relation with no rows, from ``"name TYPE, name TYPE"``."""
    typed = ", ".join(f"NULL::{c.split(' ', 1)[1]} AS {c.split(' ', 1)[0]}" for c in (x.strip() for x in columns.split(",")))
    return f"SELECT {typed} WHERE false"
ROLE_ROW_TABLES = ("hourly_activity",)
"""Tables keyed by (role, entity) whose role rows (entity = role) are the fleet-day's part and
whose endpoint rows are the cluster-days'."""


@dataclass(frozen=True)
class Scope:
    date: str | None = None
    cluster: str | None = None
    fleet: bool = False
    """A fleet-day rollup: the raw datasets and the per-GPU tables are empty to it."""

    @classmethod
    def of(cls, context) -> Scope:
        """The scope of an asset's partition: a MultiPartitionKey (date, cluster) or a day."""
        key = context.partition_key
        dims = getattr(key, "keys_by_dimension", None)
        if dims:
            return cls(date=dims[DATE_DIM], cluster=dims[CLUSTER_DIM])
        return cls(date=key, fleet=True)

    @property
    def label(self) -> str:
        return f"{self.date}|{self.cluster}" if self.cluster else str(self.date)

    def part_dir(self, data_dir: Path, table: str) -> Path:
        """``derived/<table>/date=D[/cluster=C]``, built by :func:`collectors.names.inside`."""
        folder = derived_path(data_dir, table).relative_to(data_dir)
        segments = [*folder.parts, f"date={self.date}"] + ([f"cluster={self.cluster}"] if self.cluster else [])
        return inside(data_dir, *segments)


def store_rows_sql(query: str, cluster: str) -> str:
    """A cluster-day's rows as stored: role rows become its cluster_role share, fleet rows go."""
    return f"""
        SELECT * REPLACE (
            CASE WHEN level = 'role' THEN '{CLUSTER_ROLE}' ELSE level END AS level,
            CASE WHEN level = 'role' THEN {literal(cluster)} || '/' || entity ELSE entity END AS entity)
        FROM ({query}) WHERE level IS DISTINCT FROM 'fleet'"""


def read_back_sql(source: str, cluster: str) -> str:
    """The inverse of :func:`store_rows_sql`, for a cluster's own part read inside its scope."""
    prefix = len(cluster) + 2
    return f"""
        SELECT * REPLACE (
            CASE WHEN level = '{CLUSTER_ROLE}' THEN 'role' ELSE level END AS level,
            CASE WHEN level = '{CLUSTER_ROLE}' THEN substr(entity, {prefix}) ELSE entity END AS entity)
        FROM {source}"""

