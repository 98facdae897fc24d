"""Do inference endpoints spike together or cancel out? `endpoint_correlation` (pairs of
endpoints and of GPUs inside one) and `coincidence` (per power domain: peak of the sum against
the sum of the peaks)."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, asset

from pipeline.assetkit import json_meta, materialize
from pipeline.checks import Check, violations
from pipeline.partitions import daily_partitions, day_cluster_partitions
from pipeline.resources import WarehouseResource


def _symmetric(con) -> AssetCheckResult:
    """Pearson at lag 0 is symmetric and within [−1, 1]; corr(a, b(t+L)) = corr(b, a(t−L))."""
    rows = con.execute(
        """
        SELECT x.a, x.b, x.pearson_1s, y.pearson_1s, x.best_lag_s, y.best_lag_s
        FROM endpoint_correlation AS x JOIN endpoint_correlation AS y ON x.a = y.b AND x.b = y.a AND x.date = y.date
        WHERE x.date = getvariable('partition_date')
          AND (abs(x.pearson_1s - y.pearson_1s) > 1e-4 OR abs(x.pearson_1s) > 1 + 1e-4 OR x.best_lag_s <> -y.best_lag_s)
        """
    ).fetchall()
    return violations("pairs_symmetric", rows, AssetCheckSeverity.ERROR, f"{len(rows)} pair(s) whose correlation differs by order or lies outside [−1, 1]")


def _has_pairs(con) -> AssetCheckResult:
    n, endpoints = con.execute(
        """SELECT (SELECT count(*) FROM endpoint_correlation WHERE date = getvariable('partition_date') AND pair_kind = 'endpoint'),
                  (SELECT count(DISTINCT endpoint) FROM inventory_gpus WHERE role = 'inference')"""
    ).fetchone()
    expected = endpoints * (endpoints - 1)
    return AssetCheckResult(
        check_name="all_endpoint_pairs",
        passed=n >= expected,
        severity=AssetCheckSeverity.WARN,
        metadata={"endpoint_pairs": n, "expected": expected},
        description=None if n >= expected else f"{n} of {expected} endpoint pairs: an endpoint reported no complete second?",
    )


CORR_CHECKS = [
    Check("pairs_symmetric", "Lag-0 correlation is symmetric, in [−1, 1], and best lags mirror (ERROR).", _symmetric),
    Check("all_endpoint_pairs", "Every ordered pair of inference endpoints has a row (WARN).", _has_pairs),
]


def _corr_headline(con) -> dict:
    r, co, pairs = con.execute(
        """SELECT avg(pearson_1s), avg(spike_cooccurrence), count(*) FROM endpoint_correlation
           WHERE date = getvariable('partition_date') AND pair_kind = 'endpoint'"""
    ).fetchone()
    return {
        "endpoint_pairs": pairs,
        "mean_endpoint_pearson_1s": round(r, 3) if r is not None else None,
        "mean_endpoint_spike_cooccurrence": round(co, 3) if co is not None else None,
    }


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("endpoint_correlation") for c in CORR_CHECKS],
)
def endpoint_correlation(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per ordered pair of inference endpoints (and of GPUs in one endpoint): Pearson correlation
    of 1 s power, share of a's prefill-level spikes met by b within ±1 s, best lag (±10 s)."""
    return materialize(context, warehouse, "endpoint_correlation", CORR_CHECKS, _corr_headline)


def _factor_bounds(con) -> AssetCheckResult:
    """The peak of a sum never exceeds the sum of the peaks."""
    rows = con.execute(
        """SELECT level, entity, coincidence_factor FROM coincidence
           WHERE date = getvariable('partition_date') AND NOT (coincidence_factor > 0 AND coincidence_factor <= 1 + 1e-6)"""
    ).fetchall()
    return violations("factor_within_0_1", rows, AssetCheckSeverity.ERROR, f"{len(rows)} coincidence factor(s) outside (0, 1]")


COINCIDENCE_CHECKS = [Check("factor_within_0_1", "0 < coincidence factor ≤ 1 (ERROR).", _factor_bounds)]


def _coincidence_headline(con) -> dict:
    rows = con.execute(
        """SELECT level || ':' || entity, coincidence_factor FROM coincidence
           WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role') ORDER BY 1"""
    ).fetchall()
    return {"coincidence_factor": json_meta(rows, 3)}


@asset(
    partitions_def=day_cluster_partitions,
    deps=["power_1s", "fleet_power_1s"],
    group_name="power",
    kinds={"duckdb", "parquet"},
    check_specs=[c.spec("coincidence") for c in COINCIDENCE_CHECKS],
)
def coincidence(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Per host, cluster, role and fleet (members: their GPUs) and day, on 1 s power: coincidence
    factor (peak of the sum ÷ sum of the GPUs' peaks) and smoothing ratio."""
    return materialize(context, warehouse, "coincidence", COINCIDENCE_CHECKS, _coincidence_headline)
