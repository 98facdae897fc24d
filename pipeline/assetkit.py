"""What every power-analytics asset does, in one place: compute a day's partition from its
``sql/<table>.sql``, run the table's checks on it and report row count plus headline numbers.

Keeps each asset module down to its declaration, its checks and its headline query.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import duckdb
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue

from pipeline import sqlfiles
from pipeline.checks import Check
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope

Headline = Callable[[duckdb.DuckDBPyConnection], dict]


def statements(table: str) -> tuple[list[str], str]:
    """``sql/<table>.sql`` split into its preparatory statements (temp tables the query reads
    several times) and the final query, so the file still runs as-is in the DuckDB CLI."""
    parts = sqlfiles.split(sqlfiles.query(table))
    return parts[:-1], parts[-1]


def json_meta(rows: list[tuple], digits: int = 1) -> MetadataValue:
    """``[(key, value), ...]`` as a JSON metadata dict with rounded values (UI-friendly)."""
    return MetadataValue.json({str(k): (round(float(v), digits) if v is not None else None) for k, v in rows})


def materialize(
    context: AssetExecutionContext,
    warehouse: WarehouseResource,
    table: str,
    checks: Sequence[Check] = (),
    headline: Headline | None = None,
    *,
    variables: dict[str, float | str] | None = None,
    sql: str | None = None,
    before: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> MaterializeResult:
    """Write ``table``'s partition for the context's day, then check it and describe it.

    The partition is a cluster-day or a fleet-day (pipeline/scope.py); ``sql`` names the SQL
    file when it is not ``sql/<table>.sql`` (the fleet rollups: ``rollup/<table>``).
    ``variables``: DuckDB variables the SQL reads with getvariable (asset config). Raw files
    that break the contract are already left out by ``warehouse.connection(date)`` (and named
    by ``power_1s``'s check). ``before``: runs on the connection ahead of the SQL (a polars
    kernel leaving a temp table the SQL reads, see pipeline/kernels.py).
    """
    scope = Scope.of(context)
    with warehouse.connection(scope) as con:
        for name, value in (variables or {}).items():
            con.execute(f"SET VARIABLE {name} = ?", [value])
        if before is not None:
            before(con)
        prepare, query = statements(sql or table)
        for statement in prepare:
            con.execute(statement)
        rows = warehouse.write_and_publish(con, table, scope, query)
        results = [c.run(con) for c in checks]
        metadata = headline(con) if headline else {}
    metadata.update({"rows": rows, "dagster/row_count": rows})
    return MaterializeResult(metadata=metadata, check_results=results)
