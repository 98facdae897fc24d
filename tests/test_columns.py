"""Column meanings are declared once (sql/<table>/columns.yaml) and reach every reader: the
catalog's comments (`wattline sql "describe T"`, `duckdb_columns()`), each asset's page in the UI
(`dagster/column_schema`) and docs/columns.md."""

from __future__ import annotations

import csv
import io

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline import columns, warehouse
from pipeline.constants import warehouse_path
from tests.cli_util import invoke

pytestmark = pytest.mark.slow  # one demo day (~1 min on a busy 2-core machine), shared with the docs tests


def built_columns(data_dir) -> dict[str, list[str]]:
    """Each derived table's columns as the pipeline wrote them."""
    out = {}
    for table in warehouse.derived_tables(data_dir):
        part = next((data_dir / "derived" / table).rglob("part-0.parquet"))
        out[table] = pq.read_schema(part).names
    return out


def test_every_column_of_every_derived_table_has_a_declared_meaning(demo_day):
    built = built_columns(demo_day.data_dir)
    assert len(built) >= 20, sorted(built)
    lacking = [f"{t}.{c}" for t, names in built.items() for c in names if c not in {d.name for d in columns.table_columns(t)}]
    assert not lacking, "no meaning declared (sql/<table>/columns.yaml) for: " + ", ".join(lacking)
    stale = [f"{t}.{d.name}" for t, names in built.items() for d in columns.table_columns(t) if d.name not in names]
    assert not stale, "declared but not in the table: " + ", ".join(stale)
    order = [t for t, names in built.items() if [d.name for d in columns.table_columns(t)] != names]
    assert not order, f"columns.yaml lists the columns in another order than the table has them: {order}"


def test_the_catalog_comments_every_derived_and_raw_column(demo_day):
    con = duckdb.connect(str(warehouse_path(demo_day.data_dir)), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE NOT internal AND database_name = current_database()"
        ).fetchall()
    finally:
        con.close()
    built = built_columns(demo_day.data_dir)
    relations = set(built) | {"power", "requests", "job_events", "inventory_gpus", "inventory_entities", "quarantined_files", "catalog_info"}
    missing = sorted(f"{t}.{c}" for t, c, comment in rows if t in relations and not comment)
    assert not missing, "no COMMENT ON COLUMN for: " + ", ".join(missing)
    comments = {(t, c): comment for t, c, comment in rows}
    assert comments[("power_1s", "mean_w")] == "mean of the GPU's best-source samples in the second (W)"


def test_wattline_sql_describe_shows_each_columns_meaning(demo_day):
    result = invoke("sql", "--data-dir", str(demo_day.data_dir), "--format", "csv", "describe power_1s")
    assert result.exit_code == 0, result.output
    header, *rows = list(csv.reader(io.StringIO(result.output)))
    assert header == ["column_name", "column_type", "null", "key", "default", "extra", "meaning"]
    meaning = {row[0]: row[-1] for row in rows}
    assert list(meaning)[:4] == ["date", "host", "gpu", "ts"]  # the table's own order
    assert meaning["energy_j"].endswith("(J)") and meaning["mean_w"].endswith("(W)")
    assert all(meaning.values()), meaning


def test_describe_of_a_table_without_declarations_still_works(demo_day):
    result = invoke("sql", "--data-dir", str(demo_day.data_dir), "--format", "csv", "DESCRIBE cluster_fleet;")
    assert result.exit_code == 0, result.output
    assert next(csv.reader(io.StringIO(result.output)))[-1] == "meaning"



def test_every_view_and_table_of_the_catalog_says_what_it_holds(demo_day):
    """``COMMENT ON VIEW``/``TABLE`` for every relation: a derived table's description (its
    declaration's), a raw dataset's or catalog table's doc, a helper view's line."""
    con = duckdb.connect(str(warehouse_path(demo_day.data_dir)), read_only=True)
    try:
        rows = con.execute(
            "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND database_name = current_database() "
            "UNION ALL SELECT table_name, comment FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()
    finally:
        con.close()
    comments = dict(rows)
    assert len(comments) >= 35 and {"power_1s", "swing_projection", "power", "quarantined_files", "inventory_gpus",
                                     "gpu_assignments", "catalog_info", "power_day"} <= set(comments), sorted(comments)
    lacking = sorted(name for name, comment in comments.items() if not comment)
    assert not lacking, "no COMMENT ON VIEW/TABLE for: " + ", ".join(lacking)
    assert comments["swing_projection"].startswith("Per cluster's inference endpoints and per training job")
    from pipeline.columns_doc import table_descriptions  # each asset's description in the UI

    described = table_descriptions()
    assert {t: comments[t] for t in described if t in comments} == {t: " ".join(d.split()) for t, d in described.items() if t in comments}
    assert comments["power"] == "Raw power samples (data contract): one row per GPU and sample."
    assert comments["power_day"].startswith("Helper: ")
