"""The derived tables' Parquet parts are written with the encodings that keep them small:
V2's value encodings where a dictionary would not pay, dictionaries where it does."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq

from pipeline.warehouse import write_partition

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
