"""Baseline (a), the floor: one DuckDB scan computing per-GPU per-second mean power, nothing else."""

import sys

import duckdb

glob = f"{sys.argv[1]}/power/date={sys.argv[2]}/*/*.parquet"
con = duckdb.connect()
rows = con.execute(
    f"""SELECT count(*) FROM (
          SELECT host, gpu, epoch_ns(ts) // 1000000000 AS second, avg(power_w) AS mean_w
          FROM read_parquet('{glob}') GROUP BY ALL)"""
).fetchone()[0]
print(rows)
