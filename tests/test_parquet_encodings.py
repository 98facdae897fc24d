"""The derived tables' Parquet parts are written with the encodings that keep them small:
V2's value encodings where a dictionary would not pay, dictionaries where it does; a Python
table's part (pyarrow's writer) as DuckDB's COPY of the same rows would be."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.parquet_sink import write_dataset
from pipeline import row_groups, warehouse
from pipeline.scope import CLUSTER_ROLE, Scope
from pipeline.series import SERIES_TABLES, engine
from pipeline.warehouse import compute_connection, write_partition
from tests.builders import DAY, day_start_ns, power_table, two_host_inventory

ROWS = """
SELECT DATE '2026-12-03' AS date, 'h' || (i % 2) AS host, (i % 8)::UTINYINT AS gpu,
       TIMESTAMPTZ '2026-12-03 00:00:00+00' + to_milliseconds(100 * i) AS ts,
       (300 + 400 * sin(i / 7.0))::FLOAT AS power_w
FROM range(200000) t(i)
"""


def _encodings(path) -> dict[str, set[str]]:
    md = pq.ParquetFile(path).metadata
    out: dict[str, set[str]] = {}
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            cc = md.row_group(g).column(c)
            out.setdefault(cc.path_in_schema, set()).update(cc.encodings)
    return out


def test_sql_table_parts_use_v2_encodings_where_a_dictionary_does_not_pay(tmp_path):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    assert write_partition(con, tmp_path, "power_summary", "2026-12-03", ROWS) == 200_000
    (part,) = tmp_path.rglob("part-0.parquet")
    enc = _encodings(part)
    assert "DELTA_BINARY_PACKED" in enc["ts"]  # 100 ms instants: a few bits a row
    assert "RLE_DICTIONARY" not in enc["ts"]
    assert "BYTE_STREAM_SPLIT" in enc["power_w"]
    assert "RLE_DICTIONARY" in enc["host"]  # two hosts: the dictionary stays
    # the rows read back through DuckDB as they were written
    diff = con.execute(f"SELECT count(*) FROM (({ROWS}) EXCEPT ALL SELECT * FROM read_parquet('{part}'))").fetchone()[0]
    assert diff == 0


def _column_bytes(path) -> dict[str, tuple[int, int]]:
    """Per column: (compressed, uncompressed) bytes over the row groups."""
    md = pq.ParquetFile(path).metadata
    out: dict[str, tuple[int, int]] = {}
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            cc = md.row_group(g).column(c)
            a, b = out.get(cc.path_in_schema, (0, 0))
            out[cc.path_in_schema] = (a + cc.total_compressed_size, b + cc.total_uncompressed_size)
    return out


def test_series_parts_use_split_streams_and_pages_long_enough_to_find_repeats(tmp_path):
    """A GPU whose power repeats every 40 min (a job's steps): the engine's pages hold the repeats,
    so zstd stores the 2 h series at a fraction of its size; per-second powers and energies are
    split streams, not dictionaries."""
    d = tmp_path / "data"
    two_host_inventory(d)
    rng = np.random.default_rng(3)
    period = 200 + 300 * rng.random(24_000)
    t = day_start_ns() + np.arange(72_000) * 100_000_000
    write_dataset(power_table("train-0", 0, t, np.tile(period, 3)), d, "power", prefix="a")
    paths = {s.name: tmp_path / f"{s.name}.parquet" for s in SERIES_TABLES}
    with compute_connection(d, DAY.isoformat()) as con:
        engine.write_parts(con, SERIES_TABLES, paths, DAY.isoformat())
    compressed, raw = _column_bytes(paths["power_100ms"])["power_w"]
    assert compressed < 0.5 * raw, (compressed, raw)
    for table, columns in {"power_1s": ("mean_w", "energy_j"), "energy_curve": ("power_w", "end_power_w", "energy_j")}.items():
        enc = _encodings(paths[table])
        for c in columns:
            assert "BYTE_STREAM_SPLIT" in enc[c] and "RLE_DICTIONARY" not in enc[c], (table, c, enc[c])


def test_series_parts_are_cut_in_full_row_groups_whatever_each_gpus_rows(tmp_path, monkeypatch):
    """The engine's parts are cut as a Python table's part is (one implementation: pipeline/row_groups.py):
    full row groups across GPUs whose rows are not a multiple of the size, the last one shorter."""
    monkeypatch.setattr(row_groups, "PART_ROW_GROUP_ROWS", 1000)
    d = tmp_path / "data"
    two_host_inventory(d)
    t = day_start_ns() + np.arange(1500) * 100_000_000  # 150 s at 10 Hz: 1500 rows of power_100ms a GPU
    for host, gpu in (("train-0", 0), ("train-0", 1), ("infer-0", 0)):
        write_dataset(power_table(host, gpu, t, np.full(1500, 300.0)), d, "power", prefix=f"{host}-{gpu}")
    paths = {s.name: tmp_path / f"{s.name}.parquet" for s in SERIES_TABLES}
    with compute_connection(d, DAY.isoformat()) as con:
        engine.write_parts(con, SERIES_TABLES, paths, DAY.isoformat())
    for name, path in paths.items():
        md = pq.ParquetFile(path).metadata
        n = md.num_rows
        assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [1000] * (n // 1000) + [n % 1000] * (n % 1000 > 0), name
    assert pq.ParquetFile(paths["power_100ms"]).metadata.num_rows == 4500


def _python_rows(sizes: list[int]) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """A Python table's stream as the phase tables shape it: batches of any size, each string column
    dictionary-encoded with the batch's own dictionary, 100 ms instants, FLOAT and DOUBLE values,
    a count with few values, a flag."""
    label = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([("date", pa.date32()), ("host", label), ("gpu", pa.uint8()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("power_w", pa.float32()), ("energy_j", pa.float64()), ("n", pa.int32()), ("phase", label),
                        ("busy", pa.bool_())])
    rng = np.random.default_rng(5)
    batches, at = [], 0
    for k, n in enumerate(sizes):
        i = np.arange(at, at + n)
        code = (i // 7 % 3).astype(np.int32)
        batches.append(pa.record_batch({
            "date": pa.array([DAY] * n, pa.date32()),
            "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([f"h{k % 2}"])),
            "gpu": pa.array(np.full(n, k % 8, np.uint8)),
            "ts": pa.array(1_764_720_000_000_000 + i * 100_000, pa.timestamp("us", tz="UTC")),
            "power_w": pa.array((300 + 400 * rng.random(n)).astype(np.float32)),
            "energy_j": pa.array(30 + 40 * rng.random(n)),
            "n": pa.array((i % 5).astype(np.int32), mask=i % 11 == 0),
            "phase": pa.DictionaryArray.from_arrays(code, pa.array(["idle", "decode", "prefill"])),
            "busy": pa.array(code > 0),
        }, schema=schema))
        at += n
    return schema, batches


def test_python_table_parts_read_back_as_duckdbs_copy_of_the_same_rows(tmp_path, monkeypatch):
    """A Python table's part (pyarrow's writer, warehouse.write_rows_partition): the stream's rows in
    its order, in full row groups whatever the batches' sizes, with the schema DuckDB reads back from
    its own COPY of the same rows (a dictionary of strings is VARCHAR) and the encodings that COPY
    chooses (a dictionary where the column has few values, else V2's value encodings)."""
    monkeypatch.setattr(row_groups, "PART_ROW_GROUP_ROWS", 2000)  # over DICTIONARY_SIZE_LIMIT distinct instants
    schema, batches = _python_rows([2500, 1, 0, 999, 730, 3000])
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    scope = Scope(date=DAY.isoformat())
    assert warehouse.write_rows_partition(con, tmp_path / "a", "t_rows", scope, pa.RecordBatchReader.from_batches(schema, iter(batches))) == 7230
    (part,) = (tmp_path / "a").rglob("part-0.parquet")
    md = pq.ParquetFile(part).metadata
    assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [2000] * 3 + [1230]
    want = pa.Table.from_batches(batches)
    con.register("want", want)
    copied = tmp_path / "copy.parquet"
    con.execute(f"COPY (SELECT * FROM want) TO '{copied}' ({warehouse.PARQUET_COPY_OPTIONS})")
    assert con.execute(f"DESCRIBE SELECT * FROM read_parquet('{part}')").fetchall() == \
        con.execute(f"DESCRIBE SELECT * FROM read_parquet('{copied}')").fetchall()
    got = con.execute(f"SELECT * FROM read_parquet('{part}')").fetchall()  # one file, one thread's order: the file's
    assert got == con.execute(f"SELECT * FROM read_parquet('{copied}')").fetchall()
    assert [r[3] for r in got] == sorted(r[3] for r in got)  # the stream's order
    enc = _encodings(part)
    for c in ("host", "gpu", "n", "phase", "date"):
        assert "RLE_DICTIONARY" in enc[c], (c, enc[c])
    assert "DELTA_BINARY_PACKED" in enc["ts"] and "RLE_DICTIONARY" not in enc["ts"]
    for c in ("power_w", "energy_j"):
        assert "BYTE_STREAM_SPLIT" in enc[c] and "RLE_DICTIONARY" not in enc[c], (c, enc[c])


def test_a_python_table_part_without_rows_has_the_schema(tmp_path):
    schema, _ = _python_rows([])
    con = duckdb.connect()
    assert warehouse.write_rows_partition(con, tmp_path, "t_rows", Scope(date=DAY.isoformat()), pa.RecordBatchReader.from_batches(schema, iter([]))) == 0
    (part,) = tmp_path.rglob("part-0.parquet")
    assert [r[:2] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{part}')").fetchall()][:3] == [
        ("date", "DATE"), ("host", "VARCHAR"), ("gpu", "UTINYINT")]


def test_a_cluster_days_python_table_part_keeps_the_rows_it_owns(tmp_path):
    """Rows with level and entity written for a cluster-day: its role rows become its cluster_role
    share and fleet rows go (scope.store_rows_sql), in the stream's order."""
    schema = pa.schema([("level", pa.string()), ("entity", pa.string()), ("v", pa.int64())])
    rows = [("gpu", "h/0", 1), ("fleet", "fleet", 2), ("role", "inference", 3), ("host", "h", 4), ("role", "training", 5)]
    batch = pa.record_batch({"level": [r[0] for r in rows], "entity": [r[1] for r in rows], "v": [r[2] for r in rows]}, schema=schema)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    scope = Scope(date=DAY.isoformat(), cluster="c0")
    assert warehouse.write_rows_partition(con, tmp_path, "t_levels", scope, pa.RecordBatchReader.from_batches(schema, iter([batch]))) == 4
    (part,) = tmp_path.rglob("part-0.parquet")
    assert pq.read_table(part).to_pylist() == [
        {"level": "gpu", "entity": "h/0", "v": 1}, {"level": CLUSTER_ROLE, "entity": "c0/inference", "v": 3},
        {"level": "host", "entity": "h", "v": 4}, {"level": CLUSTER_ROLE, "entity": "c0/training", "v": 5}]


def test_a_python_table_column_past_the_dictionary_limit_takes_v2s_encoding(tmp_path):
    """As DuckDB: at most DICTIONARY_SIZE_LIMIT distinct values keep a dictionary, one more does not
    (a string column then delta-length, a double split-stream)."""
    for k, want in ((warehouse.DICTIONARY_SIZE_LIMIT, ("RLE_DICTIONARY", "RLE_DICTIONARY")),
                    (warehouse.DICTIONARY_SIZE_LIMIT + 1, ("DELTA_LENGTH_BYTE_ARRAY", "BYTE_STREAM_SPLIT"))):
        i = np.arange(20_000) % k
        batch = pa.record_batch({"s": pa.array([f"value-{v}" for v in i]), "x": pa.array(i / 7)})
        out = tmp_path / str(k)
        warehouse.write_rows_partition(duckdb.connect(), out, "t_limit", Scope(date=DAY.isoformat()),
                                       pa.RecordBatchReader.from_batches(batch.schema, iter([batch])))
        (part,) = out.rglob("part-0.parquet")
        enc = _encodings(part)
        assert (want[0] in enc["s"], want[1] in enc["x"]) == (True, True), (k, enc)
