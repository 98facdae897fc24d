"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous 100 ms trace and on the driver's 1 s average."""

import polars as pl
from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.kernels import max_swings
from pipeline.partitions import day_cluster_partitions
from pipeline.resources import WarehouseResource

INCOMPLETE_WARN_SHARE = 0.05
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


def _frame(table) -> pl.DataFrame:
    """An Arrow table as a polars DataFrame (from_arrow's type says DataFrame or Series)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def native_swings(con) -> None:
    """Temp table ``_native_swings``: each GPU's max swing per window on its raw samples (the
    instant series on energy_curve's best-source samples, the avg1s series on the rows of the best
    source that reports a 1 s average), exact over sample times; one host at a time (memory)."""
    hosts = [h for (h,) in con.execute(
        "SELECT DISTINCT host FROM energy_curve WHERE date = getvariable('partition_date') ORDER BY 1").fetchall()]
    frames = []
    for host in hosts:
        inst = _frame(con.sql(
            """SELECT gpu::BIGINT AS gpu, t_ns, power_w::DOUBLE AS p FROM energy_curve
               WHERE date = getvariable('partition_date') AND host = $host AND NOT is_average ORDER BY gpu, t_ns""",
            params={"host": host},
        ).to_arrow_table())
        avg = _frame(con.sql(_AVG1S_SAMPLES, params={"host": host}).to_arrow_table())
        for series, samples in (("instant", inst), ("avg1s", avg)):
            frames.append(max_swings(samples, WINDOWS_S).with_columns(pl.lit(host).alias("host"), pl.lit(series).alias("series")))
    native = pl.concat(frames) if frames else max_swings(pl.DataFrame(), WINDOWS_S).with_columns(
        pl.lit(None, pl.Utf8).alias("host"), pl.lit(None, pl.Utf8).alias("series"))
    native = native.select("host", "gpu", "series", "window_s", "max_swing_w", "sample_interval_ms").to_arrow()
    con.execute("CREATE OR REPLACE TEMP TABLE _native_swings AS SELECT * FROM native")


def _consistent(con) -> AssetCheckResult:
    """A longer window contains shorter ones, so its max swing cannot be smaller; p50 ≤ p99 ≤ max."""
    rows = con.execute(
        """
        SELECT level, entity, series, window_s, max_swing_w, p50_swing_w, p99_swing_w,
               max(max_swing_w) OVER (PARTITION BY level, entity, series ORDER BY window_s) AS running_max
        FROM swing_stats WHERE date = getvariable('partition_date')
        QUALIFY max_swing_w < running_max - 1e-3 OR p50_swing_w > p99_swing_w + 1e-3 OR p99_swing_w > max_swing_w + 1e-3
        """
    ).fetchall()
    return violations("swings_consistent", rows, AssetCheckSeverity.ERROR, f"{len(rows)} row(s) break max swing monotonic in W or p50 ≤ p99 ≤ max")


def _windows_complete(con) -> AssetCheckResult:
    rows = con.execute(
        """
        SELECT level || ':' || entity, windows_incomplete / greatest(windows_complete + windows_incomplete, 1) AS share
        FROM swing_stats WHERE date = getvariable('partition_date') AND window_s = 2 AND series = 'instant'
        ORDER BY share DESC
        """
    ).fetchall()
    bad = [(e, round(s, 4)) for e, s in rows if s > INCOMPLETE_WARN_SHARE]
    return AssetCheckResult(
        check_name="windows_complete",
        passed=bool(rows) and not bad,
        severity=AssetCheckSeverity.WARN,
        metadata={"entities": len(rows), "over_5pct_incomplete": len(bad), "worst": str(bad[:10])},
        description=(f"{len(bad)} entit(y/ies) lose > 5% of their 2 s windows to missing samples" if bad else None) if rows else "no swing rows",
    )


CHECKS = [
    Check("swings_consistent", "Max swing grows with the window; p50 ≤ p99 ≤ max (ERROR: a computation bug).", _consistent),
    Check("windows_complete", "≤ 5% of each entity's 2 s windows are incomplete (WARN).", _windows_complete),
]


def _headline(con) -> dict:
    rows = con.execute(
        """SELECT level || ':' || entity || ' ' || series, max_swing_pct FROM swing_stats
           WHERE date = getvariable('partition_date') AND window_s = 2 AND level IN ('cluster', 'role', 'fleet')
           ORDER BY 1"""
    ).fetchall()
    return {"max_2s_swing_pct": json_meta(rows)}


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_100ms", "fleet_power_100ms", "energy_curve"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("swing_stats") for c in CHECKS],
)
def swing_stats(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per level, entity, window (1/2/10/60 s) and series (instant/avg1s): max swing in any
    sliding window (W and % of provisioned; GPUs: on their raw samples, other levels: on the grid), p50/p99 over aligned windows, max 100 ms ramp
    (W/s), aligned windows over 10%/25% of provisioned."""
    return materialize(context, warehouse, "swing_stats", CHECKS, _headline, before=native_swings)
