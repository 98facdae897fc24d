"""Do power draws move together? `endpoint_correlation` (pairs of inference endpoints and of GPUs
inside one) and `cluster_correlation` (pairs of clusters, on the fleet-day)."""

from pipeline.tables import Table, table_assets

ENDPOINT_CORRELATION = Table(
    "endpoint_correlation",
    "Per ordered pair of inference endpoints (and of GPUs in one endpoint): Pearson correlation "
    "of 1 s power, share of a's spikes (excursions above its own level) met by b within ±1 s, "
    "the share chance gives and their ratio (spike_lift, 1 = independent), best lag (±10 s).",
    "cluster-day",
    deps=["power_1s"],
)
(endpoint_correlation,) = table_assets(ENDPOINT_CORRELATION)

CLUSTER_CORRELATION = Table(
    "cluster_correlation",
    "Per ordered pair of clusters: Pearson correlation of their summed 1 s power and the best "
    "lag (±10 s). Near zero is what keeps a fleet's sum smooth.",
    "fleet-day",
    deps=[["fleet", "fleet_power_1s"]],
    group="fleet",
)
(cluster_correlation,) = table_assets(CLUSTER_CORRELATION)
