"""Compute connections bind only catalog names: a Python variable named like a table that is not
built (the Dagster asset ``power_1s`` in a module's globals) is not read by a replacement scan."""

import duckdb
import pyarrow as pa
import pytest

from pipeline.warehouse import compute_connection


def test_missing_table_is_a_catalog_error_not_a_python_variable(tmp_path):
    power_1s = pa.table({"date": ["not a table"]})  # noqa: F841 (what a replacement scan would find)
    with compute_connection(tmp_path, "2026-12-03") as con:
        with pytest.raises(duckdb.CatalogException, match="power_1s"):
            con.execute("SELECT * FROM power_1s").fetchall()
        con.register("_registered", power_1s)  # Python data is read where registered
        assert con.execute("SELECT count(*) FROM _registered").fetchone()[0] == 1
