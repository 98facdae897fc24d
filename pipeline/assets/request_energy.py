"""Energy per request (`request_energy`) and per token along the serving axes (`energy_per_token`)."""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from pipeline import sqlfiles
from pipeline.assets.phases import phase_intervals, phase_segments, phase_timeline
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.phases import checks
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope


@asset(
    partitions_def=day_cluster_partitions,
    deps=[phase_intervals],
    group_name="phases",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("request_energy") for c in checks.ENERGY_CHECKS],
)
def request_energy(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """Per request: prefill J, decode J, total J, J per prompt and per output token (attribution
    rule in docs/phases.md); idle energy stays with the endpoint (energy_per_token.idle_j)."""
    date = Scope.of(context)
    with warehouse.connection(date) as con:
        # One attribution pass for the table and its conservation check: every request touching
        # the day is charged; the partition keeps the day's arrivals (the SQL file's own filter).
        checks.charge_all_requests(con)
        rows = warehouse.write_partition(
            con, "request_energy", date, "SELECT * FROM _charged WHERE arrival_ts >= day_start() ORDER BY endpoint, arrival_ts, request_id"
        )
        j_pre, j_out, j_req = con.execute(
            """SELECT sum(prefill_j) / nullif(sum(prompt_tokens), 0), sum(decode_j) / nullif(sum(output_tokens), 0),
                      avg(total_j)
               FROM request_energy WHERE date = getvariable('partition_date')"""
        ).fetchone()
        results = [c.run(con) for c in checks.ENERGY_CHECKS]
    return MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "j_per_prompt_token": round(j_pre or 0.0, 4),
            "j_per_output_token": round(j_out or 0.0, 4),
            "j_per_request": round(j_req or 0.0, 1),
        },
        check_results=results,
    )


@asset(
    partitions_def=day_cluster_partitions,
    deps=[request_energy, phase_segments, phase_intervals, phase_timeline],
    group_name="phases",
    kinds={"duckdb", "parquet"},
)
def energy_per_token(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """J per prompt/output token and per request, mean power and shares per phase, TDP peaks per
    hour: per endpoint, overall and by batch size, prompt/output length, hour, GPU model and power limit."""
    date = Scope.of(context)
    with warehouse.connection(date) as con:
        rows = warehouse.write_partition(con, "energy_per_token", date, sqlfiles.query("energy_per_token"))
        overall = con.execute(
            """SELECT endpoint, round(j_per_prompt_token, 4), round(j_per_output_token, 4), round(prefill_energy_share, 3),
                      round(prefill_mean_w), round(decode_mean_w)
               FROM energy_per_token WHERE date = getvariable('partition_date') AND bucket_kind = 'all' ORDER BY 1"""
        ).fetchall()
    return MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "by_endpoint": MetadataValue.json(
                {e: {"j_per_prompt_token": a, "j_per_output_token": b, "prefill_energy_share": c, "prefill_mean_w": d, "decode_mean_w": f}
                 for e, a, b, c, d, f in overall}
            ),
        },
    )
