"""`training_energy`: what a training job's steps cost and how hard its gaps (collectives,
checkpoints, evals) swing the feed — from job_events, or from the power alone when a job logs none."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import day_cluster_partitions
from pipeline.resources import WarehouseResource


def _shares_valid(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT job, gap_energy_share, gap_time_share FROM training_energy WHERE date = getvariable('partition_date')
           AND NOT (gap_energy_share BETWEEN 0 AND 1 AND gap_time_share BETWEEN 0 AND 1)"""
    ).fetchall()
    return violations("shares_valid", rows, AssetCheckSeverity.ERROR)


def _events_cover_jobs(con) -> AssetCheckResult:
    """WARN when some jobs log events and others do not (a logger down?). A day without any job
    events is a supported input: every job is labelled from power and its rows say so (source)."""
    from_power, logged = con.execute(
        """SELECT list(DISTINCT job ORDER BY job) FILTER (source = 'power'), count(DISTINCT job) FILTER (source = 'job_events')
           FROM training_energy WHERE date = getvariable('partition_date')"""
    ).fetchone()
    from_power = from_power or []
    partial = bool(from_power) and logged > 0
    return AssetCheckResult(
        check_name="events_cover_jobs",
        passed=not partial,
        severity=AssetCheckSeverity.WARN,
        metadata={"jobs_from_power_only": str(from_power), "jobs_with_events": logged},
        description=(
            f"no job_events for {from_power} while other jobs log them: steps labelled from synchronized power drops"
            if partial else (f"no job_events this day: {from_power} labelled from power" if from_power else None)
        ),
    )


CHECKS = [
    Check("shares_valid", "Gap energy and time shares lie in [0, 1] (ERROR).", _shares_valid),
    Check("events_cover_jobs", "If any job logs events, every job does (WARN: the others are labelled from power).", _events_cover_jobs),
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
    partitions_def=day_cluster_partitions,
    deps=["power_100ms", "job_events"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("training_energy") for c in CHECKS],
)
def training_energy(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per training job and day, one row per gap kind: steps, median iteration time, J per step
    and per token, mean power per GPU in steps vs gaps, gap energy/time shares, and the power
    drop each kind of boundary causes (median, max W over the job's GPUs)."""
    return materialize(context, warehouse, "training_energy", CHECKS, _headline)
