"""`power_100ms`: every GPU's best-source trace on the common 100 ms grid.

The one reduction of the raw samples that the swing, correlation, headroom and phase analytics
share: they read this table (≈ 1 row per GPU per 100 ms) instead of scanning raw power again.
"""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import day_cluster_partitions
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
    return violations("samples_conserved", rows, AssetCheckSeverity.ERROR, f"{len(rows)} GPU(s) have a different sample count on the grid than in power_1s", count_key="gpus_mismatched")


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
    partitions_def=day_cluster_partitions,
    deps=["power", "power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("power_100ms") for c in CHECKS],
)
def power_100ms(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per GPU and 100 ms slot: mean best-source power (W), the driver's 1 s average (W, if any),
    sample count, source, and whether that source is itself a 1 s average. The grid all swing,
    correlation and phase analytics start from."""
    return materialize(context, warehouse, "power_100ms", CHECKS, _headline)


INCOMPLETE_WARN_SHARE = 0.05


def _entities_complete(con) -> AssetCheckResult:
    """Slots where some GPU of a host/cluster lacks a value (beyond one carried step) are excluded from swings."""
    rows = con.execute(
        """
        SELECT level || ':' || entity, avg((NOT complete)::INT) AS share
        FROM fleet_power_100ms WHERE date = getvariable('partition_date')
        GROUP BY ALL ORDER BY share DESC
        """
    ).fetchall()
    bad = [(e, round(s, 4)) for e, s in rows if s > INCOMPLETE_WARN_SHARE]
    return AssetCheckResult(
        check_name="entities_complete",
        passed=not bad,
        severity=AssetCheckSeverity.WARN,
        metadata={"entities": len(rows), "over_5pct_incomplete": len(bad), "worst": str(bad[:10])},
        description=f"{len(bad)} entit(y/ies) have > 5% incomplete 100 ms slots (a GPU silent > 100 ms): their swings exclude those windows" if bad else None,
    )


def _agrees_with_1s(con) -> AssetCheckResult:
    """The 100 ms sums and fleet_power_1s describe the same power: their day means agree within 1%."""
    rows = con.execute(
        """
        WITH a AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_100ms
                   WHERE date = getvariable('partition_date') AND complete GROUP BY ALL),
             b AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_1s
                   WHERE date = getvariable('partition_date') AND gpus_reporting = gpus_total GROUP BY ALL)
        SELECT level || ':' || entity, a.w, b.w FROM a JOIN b USING (level, entity)
        WHERE abs(a.w - b.w) > 0.01 * greatest(b.w, 1) ORDER BY 1
        """
    ).fetchall()
    return violations("agrees_with_1s", rows, AssetCheckSeverity.WARN, f"{len(rows)} entit(y/ies) whose 100 ms mean differs from fleet_power_1s by > 1%", count_key="entities_off_by_over_1pct")


FLEET_CHECKS = [
    Check("entities_complete", "Each host/cluster/role/fleet has ≤ 5% incomplete 100 ms slots (WARN).", _entities_complete),
    Check("agrees_with_1s", "Day mean of each entity's 100 ms sum agrees with fleet_power_1s within 1% (WARN: partial GPUs).", _agrees_with_1s),
]


def _fleet_headline(con) -> dict:
    rows = con.execute(
        """SELECT level || ':' || entity, max(power_w) FROM fleet_power_100ms
           WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role', 'fleet') AND complete
           GROUP BY ALL ORDER BY 1"""
    ).fetchall()
    return {"peak_100ms_w": json_meta(rows, 0)}


@asset(
    partitions_def=day_cluster_partitions,
    deps=[power_100ms, "fleet_power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("fleet_power_100ms") for c in FLEET_CHECKS],
)
def fleet_power_100ms(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per 100 ms slot, summed power (W) of every host, cluster, role and fleet, the driver's
    1 s average summed likewise, GPUs reporting, and whether the slot is complete (every
    reporting GPU has a value, carried at most one slot)."""
    return materialize(context, warehouse, "fleet_power_100ms", FLEET_CHECKS, _fleet_headline)
