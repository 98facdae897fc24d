"""`power_summary` (per entity: mean, tail, peak, energy, time above TDP and idle) and
`training_vs_inference` (per role: the fleet's numbers beside the published reference points)."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, AssetKey, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource

ENERGY_TOLERANCE = 0.02


def _ordered(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT level, entity, mean_w, p99_w, p999_w, max_w FROM power_summary
           WHERE date = getvariable('partition_date')
             AND NOT (mean_w <= max_w + 1e-3 AND p99_w <= p999_w AND p999_w <= round(max_w) + 0.5 AND mean_w >= 0)"""
    ).fetchall()
    return violations("quantiles_ordered", rows, AssetCheckSeverity.ERROR, f"{len(rows)} row(s) break 0 ≤ mean ≤ max or p99 ≤ p99.9 ≤ max")


def _energy_matches_mean(con) -> AssetCheckResult:
    """Integrated energy and mean power × covered time are two routes to the same kWh (WARN: a
    partial GPU or a long gap makes them differ)."""
    rows = con.execute(
        f"""SELECT level, entity, energy_kwh, mean_w * hours_covered / 1000 AS from_mean FROM power_summary
            WHERE date = getvariable('partition_date') AND level = 'gpu'
              AND abs(energy_kwh - mean_w * hours_covered / 1000) > {ENERGY_TOLERANCE} * greatest(energy_kwh, 1e-6)"""
    ).fetchall()
    return violations("energy_matches_mean", rows, AssetCheckSeverity.WARN, f"{len(rows)} GPU(s) whose integrated energy and mean × time differ by > 2%", count_key="gpus_off_by_over_2pct")


SUMMARY_CHECKS = [
    Check("quantiles_ordered", "0 ≤ mean ≤ max and p99 ≤ p99.9 ≤ max for every entity (ERROR).", _ordered),
    Check("energy_matches_mean", "Per GPU, integrated kWh ≈ mean W × hours covered within 2% (WARN).", _energy_matches_mean),
]


def _summary_headline(con) -> dict:
    rows = con.execute(
        """SELECT level || ':' || entity, max_pct, peak_to_avg, energy_kwh FROM power_summary
           WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role', 'fleet') ORDER BY 1"""
    ).fetchall()
    return {
        "peak_pct_of_provisioned": json_meta([(r[0], r[1]) for r in rows]),
        "peak_to_avg": json_meta([(r[0], r[2]) for r in rows], 2),
        "energy_kwh": json_meta([(r[0], r[3]) for r in rows], 2),
    }


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_100ms", "fleet_power_100ms", "power_1s", "fleet_power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("power_summary") for c in SUMMARY_CHECKS],
)
def power_summary(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per entity and day: mean, p99, p99.9, max (W and % of provisioned), peak-to-average,
    energy (kWh), share of GPU-time above TDP and idle."""
    return materialize(context, warehouse, "power_summary", SUMMARY_CHECKS, _summary_headline)


def _roles_present(con) -> AssetCheckResult:
    rows = con.execute(
        """SELECT r.role FROM (SELECT DISTINCT role FROM inventory_gpus) AS r
           ANTI JOIN (SELECT role FROM training_vs_inference WHERE date = getvariable('partition_date')
                      AND max_2s_swing_pct IS NOT NULL) AS t USING (role)"""
    ).fetchall()
    return AssetCheckResult(
        check_name="roles_present",
        passed=not rows,
        severity=AssetCheckSeverity.WARN,
        metadata={"roles_missing": str([r[0] for r in rows])},
        description=f"no power or no complete 2 s window for role(s) {[r[0] for r in rows]}" if rows else None,
    )


TVI_CHECKS = [Check("roles_present", "Every role in the inventory has a row with a 2 s swing (WARN).", _roles_present)]


def _tvi_headline(con) -> dict:
    rows = con.execute(
        """SELECT role, max_2s_swing_pct, reference_max_2s_swing_pct, peak_pct FROM training_vs_inference
           WHERE date = getvariable('partition_date') ORDER BY 1"""
    ).fetchall()
    return {
        "max_2s_swing_pct": json_meta([(r[0], r[1]) for r in rows]),
        "reference_max_2s_swing_pct": json_meta([(r[0], r[2]) for r in rows]),
        "peak_pct": json_meta([(r[0], r[3]) for r in rows]),
    }


@asset(
    partitions_def=daily_partitions,
    deps=[power_summary, "swing_stats", AssetKey(["fleet", "power_summary"]), AssetKey(["fleet", "swing_stats"])],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("training_vs_inference") for c in TVI_CHECKS],
)
def training_vs_inference(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per role and day: peak and mean % of provisioned, max 2 s swing % (instant and 1 s
    average), the 2 s swing distribution, the worst host, and the published reference points."""
    return materialize(context, warehouse, "training_vs_inference", TVI_CHECKS, _tvi_headline)
