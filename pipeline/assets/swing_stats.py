"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous 100 ms trace and on the driver's 1 s average."""

import numpy as np
import polars as pl

from pipeline.kernels import arrow_frame, best_samples, max_swings
from pipeline.tables import Table, table_assets

WINDOWS_S = (1, 2, 10, 60)

_AVG1S_SAMPLES = """
SELECT gpu, t_ns, power_avg_w, source_rank::UTINYINT AS source_rank
FROM power_day_samples WHERE host = $host AND power_avg_w IS NOT NULL
"""

_INSTANT_SAMPLES = """
SELECT t_ns, power_w::DOUBLE AS p FROM energy_curve
WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu AND NOT is_average
"""


def _swings(samples: pl.DataFrame, host: str, series: str) -> pl.DataFrame:
    return max_swings(samples, WINDOWS_S).with_columns(pl.lit(host).alias("host"), pl.lit(series).alias("series"))


def native_swings(con) -> None:
    """Temp table ``_native_swings``: each GPU's max swing per window on its raw samples (the
    instant series on energy_curve's best-source samples, the avg1s series on the rows of the best
    source that reports a 1 s average, as kernels.best_samples selects them), exact over sample
    times; one GPU at a time (memory: a GPU-day's samples, and a host's 1 s averages)."""
    gpus: dict[str, list[int]] = {}
    for host, gpu in con.execute(
        "SELECT DISTINCT host, gpu FROM energy_curve WHERE date = getvariable('partition_date') ORDER BY 1, 2").fetchall():
        gpus.setdefault(host, []).append(gpu)
    frames = []
    for host, host_gpus in gpus.items():
        avg = con.sql(_AVG1S_SAMPLES, params={"host": host}).to_arrow_table()
        avg_gpu = avg["gpu"].to_numpy()
        avg_t, avg_p, avg_rank = avg["t_ns"].to_numpy(), avg["power_avg_w"].to_numpy(), avg["source_rank"].to_numpy()
        del avg
        for gpu in host_gpus:
            # the curve's part is written sorted by (host, gpu, t_ns) in row groups that the gpu
            # filter skips; sorted here only if it ever is not
            inst = arrow_frame(con.sql(_INSTANT_SAMPLES, params={"host": host, "gpu": gpu}).to_arrow_table())
            if not inst["t_ns"].is_sorted():
                inst = inst.sort("t_ns")
            frames.append(_swings(inst.with_columns(pl.lit(gpu, pl.Int64).alias("gpu")), host, "instant"))
            rows = np.flatnonzero(avg_gpu == gpu)
            t, p, _ = best_samples(avg_t[rows], avg_p[rows], avg_rank[rows])
            frames.append(_swings(pl.DataFrame({"gpu": np.full(len(t), gpu, np.int64), "t_ns": t, "p": p}), host, "avg1s"))
    native = pl.concat(frames) if frames else max_swings(pl.DataFrame(), WINDOWS_S).with_columns(
        pl.lit(None, pl.Utf8).alias("host"), pl.lit(None, pl.Utf8).alias("series"))
    native = native.select("host", "gpu", "series", "window_s", "max_swing_w", "sample_interval_ms").to_arrow()
    con.register("_native_swings_arrow", native)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _native_swings AS SELECT * FROM _native_swings_arrow")
    finally:
        con.unregister("_native_swings_arrow")


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
