"""What an asset's page in the Dagster UI says about its table: the warehouse view it is read
through, where its docs are, and each column's meaning and unit (from pipeline/columns.py)."""

from __future__ import annotations

from typing import Any

from dagster import MetadataValue, TableColumn, TableSchema

from pipeline import columns


def column_schema(table: str) -> TableSchema:
    """``dagster/column_schema``: the declared columns, the unit as the type the UI shows beside each."""
    return TableSchema(columns=[TableColumn(c.name, type=c.unit or "-", description=c.meaning) for c in columns.table_columns(table)])


def asset_docs(table: str, doc: str, rollup_prefix: str | None = None) -> dict[str, Any]:
    """The asset's description and definition metadata; ``rollup_prefix``: the asset is the
    table's fleet-day rollup under that key prefix, which its description explains."""
    description = doc
    if rollup_prefix:
        description += (
            f"\n\nThe fleet-day part of `{table}` (hence the same name under `{rollup_prefix}/`): the rows that need "
            f"every cluster (role and fleet), rolled up from the cluster-days' parts of `{table}`. Both parts are "
            f"rows of the one warehouse view `{table}`."
        )
    return {
        "description": description,
        "metadata": {
            "dagster/column_schema": column_schema(table),
            "warehouse view": MetadataValue.text(f"{table} (wattline sql \"select * from {table} limit 5\")"),
            "docs": MetadataValue.path(f"docs/columns.md#{table}"),
        },
    }
