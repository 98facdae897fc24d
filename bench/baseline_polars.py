"""Baseline (b), what users write today: polars reads the day, per GPU a rolling 2 s swing, plus aggregates."""

import sys

import polars as pl

glob = f"{sys.argv[1]}/power/date={sys.argv[2]}/*/*.parquet"
df = pl.read_parquet(glob, columns=["ts", "host", "gpu", "power_w"]).sort("host", "gpu", "ts")
swing = df.with_columns(
    (
        pl.col("power_w").rolling_max_by("ts", window_size="2s") - pl.col("power_w").rolling_min_by("ts", window_size="2s")
    ).over("host", "gpu").alias("swing_2s_w")
)
per_gpu = swing.group_by("host", "gpu").agg(
    pl.col("power_w").mean().alias("mean_w"),
    pl.col("power_w").max().alias("max_w"),
    pl.col("swing_2s_w").max().alias("max_swing_2s_w"),
    pl.col("power_w").quantile(0.99).alias("p99_w"),
)
per_second = df.group_by("host", "gpu", pl.col("ts").dt.truncate("1s")).agg(pl.col("power_w").mean())
print(per_gpu.height, per_second.height)
