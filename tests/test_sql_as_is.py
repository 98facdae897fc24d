"""A plain SQL table's file runs as-is in the DuckDB CLI on a built day's read-only catalog
(``duckdb data/warehouse.duckdb``, then ``SET VARIABLE partition_date = ...`` and the file): no
Python hook leaves a temp table it reads. request_energy's and training_energy's measured spans are
the macro power_runs(kind) (sql/views/power_runs.sql), training_energy's earlier days' events a catalog
view, and power_cap_whatif binds on a day whose phase_intervals has no part (typed, empty)."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from pipeline import warehouse
from pipeline.constants import SQL_DIR
from pipeline.scope import ALWAYS_DEFINED, empty_relation_sql
from tests.days import copy_of

TABLES = ["request_energy", "training_energy", "power_cap_whatif"]


def run_as_is(con: duckdb.DuckDBPyConnection, table: str, date: str):
    """The table's SQL file run whole, as the CLI reads it, after the two settings a session needs."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET VARIABLE partition_date = DATE '{date}'")
    return con.sql((SQL_DIR / table / f"{table}.sql").read_text()).to_arrow_table()


def rows_apart(got, want) -> tuple[int, int]:
    """Rows of each not in the other (EXCEPT ALL both ways)."""
    con = duckdb.connect()
    con.register("got", got)
    con.register("want", want)
    return (con.execute("SELECT count(*) FROM (FROM got EXCEPT ALL FROM want)").fetchone()[0],
            con.execute("SELECT count(*) FROM (FROM want EXCEPT ALL FROM got)").fetchone()[0])


@pytest.mark.parametrize("table", TABLES)
def test_sql_file_runs_as_is_on_the_read_only_catalog(report_day, table):
    """The rows the file gives on the catalog are the day's part: the same file, no hook."""
    assert set(TABLES) <= report_day.tables()
    con = duckdb.connect(str(report_day.data_dir / "warehouse.duckdb"), read_only=True)
    try:
        got = run_as_is(con, table, report_day.date)
    finally:
        con.close()
    want = warehouse.read_day(report_day.data_dir, table, report_day.date)
    assert got.num_rows == want.num_rows > 0
    assert got.column_names == want.column_names
    assert rows_apart(got, want.cast(got.schema)) == (0, 0)


def test_power_cap_whatif_binds_where_phase_intervals_was_never_built(report_day, tmp_path):
    """A day whose phase_intervals has no part at all (a run that selected power_cap_whatif without
    it): the compute connection and the catalog define phase_intervals typed and empty, so the
    file runs as-is and every endpoint second reads 'unlabelled'."""
    d = copy_of(report_day, tmp_path / "data")
    shutil.rmtree(d / "derived" / "phase_intervals")
    warehouse.publish(d)
    with warehouse.compute_connection(d, report_day.date) as con:
        assert con.execute("SELECT count(*) FROM phase_intervals").fetchone()[0] == 0
        computed = run_as_is(con, "power_cap_whatif", report_day.date)
    con = duckdb.connect(str(d / "warehouse.duckdb"), read_only=True)
    try:
        cataloged = run_as_is(con, "power_cap_whatif", report_day.date)
    finally:
        con.close()
    assert computed.num_rows > 0 and rows_apart(computed, cataloged) == (0, 0)
    phases = set(computed.column("phase").to_pylist())
    assert "unlabelled" in phases and not phases & {"prefill", "decode"}


def test_tables_defined_before_they_are_built_have_their_built_columns(report_day):
    """The columns declared for a table that is defined typed and empty until built (scope.ALWAYS_DEFINED)
    are those of its built part, names and types in order: the declaration cannot drift from the table."""
    assert set(ALWAYS_DEFINED) <= report_day.tables()
    con = duckdb.connect()
    for table, columns in ALWAYS_DEFINED.items():
        parts = warehouse.day_parts(report_day.data_dir, table, report_day.date)
        built = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{parts[0]}', hive_partitioning = false)").fetchall()
        declared = con.execute(f"DESCRIBE {empty_relation_sql(columns)}").fetchall()
        assert [r[:2] for r in declared] == [r[:2] for r in built], table
