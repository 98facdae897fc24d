"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous 100 ms trace and on the driver's 1 s average."""

import polars as pl

from pipeline.kernels import arrow_frame, max_swings
from pipeline.tables import Table, table_assets

WINDOWS_S = (1, 2, 10, 60)

_AVG1S_SAMPLES = """
WITH m AS (  -- per GPU-minute, the best-ranked source that reports the driver's 1 s average
    SELECT gpu, minute_ns, min(source_rank) AS source_rank
    FROM power_day_samples WHERE host = $host AND power_avg_w IS NOT NULL GROUP BY ALL
)
SELECT s.gpu::BIGINT AS gpu, s.t_ns, avg(s.power_avg_w)::DOUBLE AS p
FROM power_day_samples AS s JOIN m USING (gpu, minute_ns)
WHERE s.host = $host AND s.source_rank = m.source_rank AND s.power_avg_w IS NOT NULL
GROUP BY s.gpu, s.t_ns ORDER BY 1, 2
"""


def native_swings(con) -> None:
    """Temp table ``_native_swings``: each GPU's max swing per window on its raw samples (the
    instant series on energy_curve's best-source samples, the avg1s series on the rows of the best
    source that reports a 1 s average), exact over sample times; one host at a time (memory)."""
    hosts = [h for (h,) in con.execute(
        "SELECT DISTINCT host FROM energy_curve WHERE date = getvariable('partition_date') ORDER BY 1").fetchall()]
    frames = []
    for host in hosts:
        # the curve's part is written sorted by (host, gpu, t_ns) and a scan keeps file order: no
        # ORDER BY (it cost 0.5 s CPU per 2.8 M samples); sorted here only if it ever is not
        inst = arrow_frame(con.sql(
            """SELECT gpu::BIGINT AS gpu, t_ns, power_w::DOUBLE AS p FROM energy_curve
               WHERE date = getvariable('partition_date') AND host = $host AND NOT is_average""",
            params={"host": host},
        ).to_arrow_table())
        if not inst.select(((pl.col("gpu").diff() > 0) | ((pl.col("gpu").diff() == 0) & (pl.col("t_ns").diff() >= 0))).all()).item():
            inst = inst.sort("gpu", "t_ns")
        avg = arrow_frame(con.sql(_AVG1S_SAMPLES, params={"host": host}).to_arrow_table())
        for series, samples in (("instant", inst), ("avg1s", avg)):
            frames.append(max_swings(samples, WINDOWS_S).with_columns(pl.lit(host).alias("host"), pl.lit(series).alias("series")))
    native = pl.concat(frames) if frames else max_swings(pl.DataFrame(), WINDOWS_S).with_columns(
        pl.lit(None, pl.Utf8).alias("host"), pl.lit(None, pl.Utf8).alias("series"))
    native = native.select("host", "gpu", "series", "window_s", "max_swing_w", "sample_interval_ms").to_arrow()
    con.execute("CREATE OR REPLACE TEMP TABLE _native_swings AS SELECT * FROM native")


SWING_STATS = Table(
    "swing_stats",
    "Per level, entity, window (1/2/10/60 s) and series (instant/avg1s): max swing in any sliding "
    "window (W and % of provisioned; GPUs: on their raw samples, other levels: on the grid), p50/p99 "
    "over aligned windows, max 100 ms ramp (W/s), aligned windows over 10%/25% of provisioned.",
    "cluster-day",
    deps=["power_100ms", "fleet_power_100ms", "energy_curve"],
    before=native_swings,
    rollup=True,  # role and fleet rows: the same SQL over the rolled-up 100 ms series
    rollup_deps=[["fleet", "fleet_power_100ms"]],
)
swing_stats, fleet_swing_stats = table_assets(SWING_STATS)
