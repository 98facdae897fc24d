"""`training_energy`: what a training job's steps cost and how hard its gaps (collectives,
checkpoints, evals) swing the feed — from job_events, or from the power alone when a job logs none."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check
from pipeline.constants import DUCKDB_POOL
from pipeline.partitions import daily_partitions
from pipeline.resources import WarehouseResource


def _shares_valid(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT job, gap_energy_share, gap_time_share FROM training_energy WHERE date = getvariable('partition_date')
           AND NOT (gap_energy_share BETWEEN 0 AND 1 AND gap_time_share BETWEEN 0 AND 1)"""
    ).fetchall()
    return AssetCheckResult(
        check_name="shares_valid",
        passed=not rows,
        severity=AssetCheckSeverity.ERROR,
        metadata={"violations": len(rows), "examples": str(rows[:5])},
    )


def _events_cover_jobs(con) -> AssetCheckResult:
    """Jobs labelled from power alone are estimates; say which (WARN)."""
    rows = con.execute(
        "SELECT DISTINCT job FROM training_energy WHERE date = getvariable('partition_date') AND source = 'power' ORDER BY 1"
    ).fetchall()
    return AssetCheckResult(
        check_name="events_cover_jobs",
        passed=not rows,
        severity=AssetCheckSeverity.WARN,
        metadata={"jobs_from_power_only": str([r[0] for r in rows])},
        description=f"no job_events for {[r[0] for r in rows]}: steps labelled from synchronized power drops" if rows else None,
    )


CHECKS = [
    Check("shares_valid", "Gap energy and time shares lie in [0, 1] (ERROR).", _shares_valid),
    Check("events_cover_jobs", "Every job with power has job_events (WARN: otherwise labelled from power).", _events_cover_jobs),
]


def _headline(con) -> dict:
    rows = con.execute(
        """SELECT job, any_value(j_per_step), any_value(gap_energy_share), max(boundary_drop_max_w), any_value(source)
           FROM training_energy WHERE date = getvariable('partition_date') GROUP BY job ORDER BY 1"""
    ).fetchall()
    return {
        "j_per_step": json_meta([(r[0], r[1]) for r in rows], 0),
        "gap_energy_share": json_meta([(r[0], r[2]) for r in rows], 3),
        "max_boundary_drop_w": json_meta([(r[0], r[3]) for r in rows], 0),
        "sources": ", ".join(f"{r[0]}: {r[4]}" for r in rows),
    }


@asset(
    partitions_def=daily_partitions,
    deps=["power_100ms", "job_events"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    pool=DUCKDB_POOL,
    check_specs=[c.spec("training_energy") for c in CHECKS],
)
def training_energy(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per training job and day, one row per gap kind: steps, median iteration time, J per step
    and per token, mean power per GPU in steps vs gaps, gap energy/time shares, and the power
    drop each kind of boundary causes (median, max W over the job's GPUs)."""
    return materialize(context, warehouse, "training_energy", CHECKS, _headline)
