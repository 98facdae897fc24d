"""A Python table that streams its rows (Table(rows=fn) returning a RecordBatchReader): the part
keeps the stream's order on a compute connection (which does not keep insertion order), and what
the function learnt reaches the checks."""

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.scope import Scope
from pipeline.tables import Table, TableRun

SCHEMA = pa.schema([("i", pa.int64())])
BATCHES = 60


def _rows(con, run: TableRun) -> pa.RecordBatchReader:
    """Descending values in many batches: any reordering by the COPY shows."""
    run.found["batches"] = BATCHES
    return pa.RecordBatchReader.from_batches(SCHEMA, (
        pa.record_batch({"i": np.arange(k * 1000, (k - 1) * 1000, -1)}, schema=SCHEMA) for k in range(BATCHES, 0, -1)))


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("SET preserve_insertion_order = false")  # as compute connections
    c.execute("SET threads = 4")
    yield c
    c.close()


def _writer(con, out):
    def write(query: str) -> int:
        con.execute(f"COPY ({query}) TO '{out}' (FORMAT parquet, ROW_GROUP_SIZE 2048)")
        return con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchall()[0][0]
    return write


def test_a_streamed_part_keeps_the_stream_order(con, tmp_path):
    table = Table("t_stream", "A stream.", "cluster-day", rows=_rows)
    run = TableRun(scope=Scope(date="2026-11-30"), rollup=False, grid_step_ms=100)
    out = tmp_path / "part.parquet"
    assert table._write_rows(con, run, _writer(con, out)) == BATCHES * 1000
    assert np.array_equal(pq.read_table(out)["i"].to_numpy(), np.arange(BATCHES * 1000, 0, -1))
    assert run.found == {"batches": BATCHES}  # what the function learnt, for the checks and headline
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0] is False

