"""The derived tables' Parquet parts are written with the encodings that keep them small:
V2's value encodings where a dictionary would not pay, dictionaries where it does."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow.parquet as pq

from collectors.parquet_sink import write_dataset
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
