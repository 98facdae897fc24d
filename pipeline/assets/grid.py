"""`power_100ms`: every GPU's best-source trace on the common 100 ms grid.

The one reduction of the raw samples that the swing, correlation, headroom and phase analytics
share: they read this table (≈ 1 row per GPU per 100 ms) instead of scanning raw power again.
"""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import materialize
from pipeline.checks import Check
from pipeline.constants import DUCKDB_POOL
from pipeline.partitions import daily_partitions
from pipeline.resources import WarehouseResource

GRID_GAP_WARN_SHARE = 0.05


def _samples_conserved(con) -> AssetCheckResult:
    """Every best-source sample lands in exactly one slot: the grid's sample count per GPU equals power_1s's."""
    rows = con.execute(
        """
        WITH g AS (SELECT host, gpu, sum(samples) AS n FROM power_100ms WHERE date = getvariable('partition_date') GROUP BY ALL),
             s AS (SELECT host, gpu, sum(samples) AS n FROM power_1s WHERE date = getvariable('partition_date') GROUP BY ALL)
        SELECT host, gpu, g.n, s.n FROM g FULL JOIN s USING (host, gpu)
        WHERE g.n IS DISTINCT FROM s.n ORDER BY 1, 2
        """
    ).fetchall()
    return AssetCheckResult(
        check_name="samples_conserved",
        passed=not rows,
        severity=AssetCheckSeverity.ERROR,
        metadata={"gpus_mismatched": len(rows), "examples": str(rows[:5])},
        description=f"{len(rows)} GPU(s) have a different sample count on the grid than in power_1s" if rows else None,
    )


def _grid_gaps(con) -> AssetCheckResult:
    """Empty 100 ms slots between a GPU's first and last sample (the sampling was slower than 10 Hz or stalled)."""
    rows = con.execute(
        """
        SELECT host || '/' || gpu, 1 - count(*) / (slot_100ms(max(ts)) - slot_100ms(min(ts)) + 1) AS empty_share
        FROM power_100ms WHERE date = getvariable('partition_date')
        GROUP BY host, gpu ORDER BY empty_share DESC
        """
    ).fetchall()
    bad = [(g, round(s, 4)) for g, s in rows if s > GRID_GAP_WARN_SHARE]
    return AssetCheckResult(
        check_name="grid_gaps",
        passed=not bad,
        severity=AssetCheckSeverity.WARN,
        metadata={"gpus": len(rows), "gpus_over_5pct_empty": len(bad), "worst": str(bad[:10]), "max_empty_share": float(rows[0][1]) if rows else 0.0},
        description=f"{len(bad)} GPU(s) leave > 5% of their 100 ms slots empty (sampled slower than 10 Hz?): swings there use carried values or are excluded" if bad else None,
    )


CHECKS = [
    Check("samples_conserved", "Each GPU's samples on the grid equal its samples in power_1s (nothing lost or double-counted).", _samples_conserved),
    Check("grid_gaps", "Each GPU fills ≥ 95% of the 100 ms slots between its first and last sample (WARN).", _grid_gaps),
]


def _headline(con) -> dict:
    gpus, slots, sources, avg_share = con.execute(
        """SELECT count(DISTINCT (host, gpu)), count(*), string_agg(DISTINCT source, ', '), avg((power_avg_w IS NOT NULL)::INT)
           FROM power_100ms WHERE date = getvariable('partition_date')"""
    ).fetchone()
    return {"gpus": gpus, "slots": slots, "sources": sources or "", "share_with_driver_avg": round(avg_share or 0.0, 3)}


@asset(
    partitions_def=daily_partitions,
    deps=["power", "power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    pool=DUCKDB_POOL,
    check_specs=[c.spec("power_100ms") for c in CHECKS],
)
def power_100ms(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per GPU and 100 ms slot: mean best-source power (W), the driver's 1 s average (W, if any),
    sample count and source. The grid all swing, correlation and phase analytics start from."""
    return materialize(context, warehouse, "power_100ms", CHECKS, _headline, raw_power=True)
