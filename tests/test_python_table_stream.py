"""A Python table that streams its rows (Table(rows=fn) returning a RecordBatchReader): the write
gets the stream in its order, the function's own queries run on one DuckDB thread, and what the
function learnt reaches the checks."""

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


def _writer(out):
    def write(stream) -> int:
        rows = stream().read_all()
        pq.write_table(rows, out)
        return rows.num_rows
    return write


def test_a_streamed_part_keeps_the_stream_order(con, tmp_path):
    table = Table("t_stream", "A stream.", "cluster-day", rows=_rows)
    run = TableRun(scope=Scope(date="2026-11-30"), rollup=False, grid_step_ms=100)
    out = tmp_path / "part.parquet"
    assert table._write_rows(con, run, _writer(out)) == BATCHES * 1000
    assert np.array_equal(pq.read_table(out)["i"].to_numpy(), np.arange(BATCHES * 1000, 0, -1))
    assert run.found == {"batches": BATCHES}  # what the function learnt, for the checks and headline
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0] is False



def test_a_streamed_part_is_written_on_one_thread_and_the_setting_comes_back(con, tmp_path):
    """The rows' own queries run on one DuckDB thread while the part is written, and the
    database's thread count is the caller's again after it, also when the write fails."""
    seen = []

    def rows(c, run: TableRun) -> pa.RecordBatchReader:
        cur = c.cursor()  # as the phase tables read while the COPY runs

        def batches():
            for k in range(3):
                seen.append(cur.execute("SELECT current_setting('threads')").fetchall()[0][0])
                yield pa.record_batch({"i": np.arange(k, k + 10)}, schema=SCHEMA)
        return pa.RecordBatchReader.from_batches(SCHEMA, batches())

    table = Table("t_one_thread", "A stream.", "cluster-day", rows=rows)
    run = TableRun(scope=Scope(date="2026-11-30"), rollup=False, grid_step_ms=100)
    assert table._write_rows(con, run, _writer(tmp_path / "part.parquet")) == 30
    assert seen == [1, 1, 1]
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 4

    def failing(stream) -> int:
        raise duckdb.IOException("disk full")

    with pytest.raises(duckdb.IOException):
        table._write_rows(con, run, failing)
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 4
