"""Inference phases: `phase_intervals` (the exact timeline, in event time: intervals between
consecutive request events), `phase_segments` (runs of one label, from the request log in event
time and from power alone) and `phase_timeline` (the 100 ms grid: charts, the power-only labels,
the clock-skew check)."""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from pipeline import sqlfiles
from pipeline.partitions import day_cluster_partitions
from pipeline.phases import checks
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope
from pipeline.tables import Table, statements, table_assets

ENDPOINTS_PER_CHUNK = 4
"""phase_timeline sweeps the request log this many endpoints at a time: a 64-GPU cluster-day of 16
endpoints needs more than 1.1 GiB in one sweep, a chunk of 4 a quarter of that."""


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_100ms", "requests"],
    group_name="phases",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("phase_timeline") for c in checks.TIMELINE_CHECKS],
)
def phase_timeline(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """Per endpoint GPU and 100 ms slot: power, requests in prefill/decode, the request-based
    phase label and the power-only label (`power_phase`). See docs/phases.md."""
    date = Scope.of(context)
    with warehouse.connection(date) as con:
        prepare, query = statements("phase_timeline")
        n_endpoints = con.execute("SELECT count(DISTINCT endpoint) FROM inventory_gpus").fetchone()[0]
        chunks = max(1, -(-n_endpoints // ENDPOINTS_PER_CHUNK))
        con.execute("SET VARIABLE phase_chunks = ?", [chunks])
        for statement in prepare:
            if "getvariable('phase_chunk')" not in statement:
                con.execute(statement)
                continue
            for chunk in range(chunks):
                con.execute("SET VARIABLE phase_chunk = ?", [chunk])
                con.execute(statement)
        rows = warehouse.write_and_publish(con, "phase_timeline", date, query)
        endpoints, logged, share = con.execute(
            """SELECT count(DISTINCT endpoint), count(DISTINCT endpoint) FILTER (WHERE phase IS NOT NULL),
                      avg((phase = 'prefill')::INT) FILTER (WHERE phase <> 'idle')
               FROM phase_timeline WHERE date = getvariable('partition_date')"""
        ).fetchone()
        results = [c.run(con) for c in checks.TIMELINE_CHECKS]
    return MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "endpoints": endpoints,
            "endpoints_with_request_log": logged,
            "prefill_share_of_busy_time": round(share or 0.0, 4),
        },
        check_results=results,
    )


PREFILL_RESOLVABLE_MS = 100.0
"""Power-only prefill detection needs samples at least this close: continuous-batching prefills
last tens to hundreds of ms (h200-capture-4: median 90 ms)."""

POWER_RESOLUTION_SQL = """
SELECT g.endpoint, c.source, bool_or(c.is_average) AS is_average,
       median(c.next_t_ns - c.t_ns) / 1e6 AS sample_interval_ms
FROM energy_curve AS c JOIN inventory_gpus AS g USING (host, gpu)
WHERE c.date = getvariable('partition_date') AND g.endpoint IS NOT NULL
GROUP BY ALL ORDER BY 1, 2
"""


def power_resolution(con) -> dict:
    """Per endpoint and power source: the samples' spacing and whether power alone can resolve
    prefills there (a 1 s average cannot: say so rather than guess)."""
    out: dict = {}
    for endpoint, source, is_average, interval_ms in con.execute(POWER_RESOLUTION_SQL).fetchall():
        if is_average:
            verdict = "prefills cannot be resolved: the source is a 1 s average"
        elif interval_ms is None or interval_ms > PREFILL_RESOLVABLE_MS:
            verdict = f"prefills shorter than ~{interval_ms or 0:.0f} ms cannot be resolved"
        else:
            verdict = "resolves prefills of a few samples"
        out.setdefault(endpoint, {})[source] = {"sample_interval_ms": None if interval_ms is None else round(interval_ms, 1), "power_only": verdict}
    return out


PHASE_INTERVALS = Table(
    "phase_intervals",
    "Per logged endpoint: the elementary intervals between consecutive request events with their "
    "label (prefill / decode / idle), requests and tokens in each, and their energy (J, all GPUs, "
    "from energy_curve). The exact timeline request_energy and phase_segments use.",
    "cluster-day",
    deps=["energy_curve", "requests"],
    group="phases",
)
(phase_intervals,) = table_assets(PHASE_INTERVALS)


@asset(
    partitions_def=day_cluster_partitions,
    deps=[phase_timeline, phase_intervals, "energy_curve"],
    group_name="phases",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("phase_segments") for c in checks.SEGMENT_CHECKS],
)
def phase_segments(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """Maximal runs of one phase per endpoint GPU, `source` = requests or power, with mean/peak
    W, energy J, tokens and whether the peak exceeded TDP."""
    date = Scope.of(context)
    with warehouse.connection(date) as con:
        rows = warehouse.write_and_publish(con, "phase_segments", date, sqlfiles.query("phase_segments"))
        stats = con.execute(
            """SELECT source || ':' || phase, count(*), round(avg(mean_w), 1), count(*) FILTER (WHERE above_tdp)
               FROM phase_segments WHERE date = getvariable('partition_date') GROUP BY ALL ORDER BY 1"""
        ).fetchall()
        resolution = power_resolution(con)
        results = [c.run(con) for c in checks.SEGMENT_CHECKS]
    return MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "segments": MetadataValue.json({k: {"n": n, "mean_w": w, "above_tdp": a} for k, n, w, a in stats}),
            "power_resolution": MetadataValue.json(resolution),
        },
        check_results=results,
    )
