"""Power reduced to seconds: per GPU (`power_1s`) and per host, cluster, role and fleet (`fleet_power_1s`)."""


from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from pipeline import sqlfiles
from pipeline.assetkit import materialize
from pipeline.checks import POWER_1S_CHECKS
from pipeline.partitions import day_cluster_partitions
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope
from pipeline.tables import Table, table_assets


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("power_1s") for c in POWER_1S_CHECKS],
)
def power_1s(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per GPU per second: mean, min, max power (W), trapezoid energy (J), samples, gap flag.

    Built from each GPU's best source per minute (nvml-buffer > nvml-field > nvidia-smi
    instant > 1 s average); files that break the contract are quarantined and named by a check.
    """
    date = Scope.of(context)
    with warehouse.connection(date) as con:  # validates the day's files, quarantining bad ones
        for path, why in warehouse.rejected_files("power", date).items():
            context.log.error(f"in quarantine: {path}: {why}")
        rows = warehouse.write_and_publish(con, "power_1s", date, sqlfiles.query("power_1s"))
        gpus, energy_j, sources = con.execute(
            """SELECT count(DISTINCT (host, gpu)), coalesce(sum(energy_j), 0), string_agg(DISTINCT source, ', ')
               FROM power_1s WHERE date = getvariable('partition_date')"""
        ).fetchone()
        rejected = warehouse.rejected_files("power", date)  # files with damaged data are found while writing
        files_used = con.execute("SELECT len(getvariable('files_power'))").fetchone()[0]
        converted = warehouse.converted_files(date)
        checks = [c.run(con, rejected_files=rejected, converted_files=converted) for c in POWER_1S_CHECKS]
    return MaterializeResult(
        metadata={
            "rows": rows,
            "gpus": gpus,
            "energy_kwh": round(energy_j / 3.6e6, 3),
            "sources": sources or "",
            "files_used": files_used,
            "files_rejected": len(rejected),
            "files_converted": len(converted),
            "dagster/row_count": rows,
        },
        check_results=checks,
    )


@asset(
    partitions_def=day_cluster_partitions,
    deps=[power_1s],
    group_name="power",
    kinds={"duckdb", "parquet"},
)
def fleet_power_1s(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """Per second, summed power (W) and energy (J) of every host, cluster, role and fleet, with
    provisioned power, % of provisioned and how many of the domain's GPUs reported."""
    return materialize(context, warehouse, "fleet_power_1s", headline=fleet_power_1s_headline)


def fleet_power_1s_headline(con) -> dict:
    peaks = con.execute(
        """SELECT level, entity, max(power_pct) FROM fleet_power_1s
           WHERE date = getvariable('partition_date') AND level IN ('role', 'fleet', 'cluster')
           GROUP BY ALL ORDER BY 1, 2"""
    ).fetchall()
    return {"peak_pct_of_provisioned": MetadataValue.json({f"{lvl}:{ent}": round(p, 1) for lvl, ent, p in peaks})}


ENERGY_CURVE = Table(
    "energy_curve",
    "Per GPU and best-source sample: cumulative energy (J) since the day's first sample, with the "
    "next sample (time, W) so the energy of any interval is E(b) − E(a) (macro energy_between).",
    "cluster-day",
    deps=["power", "power_1s"],
)
(energy_curve,) = table_assets(ENERGY_CURVE)
