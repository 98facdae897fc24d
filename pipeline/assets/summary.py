"""`power_summary` (per entity: mean, tail, peak, energy, time above TDP and idle) and
`training_vs_inference` (per role: the fleet's numbers beside the published reference points)."""

from pipeline.tables import Table, table_assets

POWER_SUMMARY = Table(
    "power_summary",
    "Per entity and day: mean, p99, p99.9, max (W and % of provisioned), peak-to-average, "
    "energy (kWh), share of GPU-time above TDP and idle.",
    "cluster-day",
    deps=["power_100ms", "fleet_power_100ms", "power_1s", "fleet_power_1s"],
    rollup=True,  # role and fleet rows, from the rolled-up series and the cluster-days' parts
    rollup_deps=["power_summary", ["fleet", "fleet_power_100ms"]],
)
power_summary, fleet_power_summary = table_assets(POWER_SUMMARY)

TRAINING_VS_INFERENCE = Table(
    "training_vs_inference",
    "Per role and day: peak and mean % of provisioned, max 2 s swing % (instant and 1 s "
    "average), the 2 s swing distribution, the worst host, and the published reference points.",
    "fleet-day",
    deps=["power_summary", "swing_stats", ["fleet", "power_summary"], ["fleet", "swing_stats"]],
)
(training_vs_inference,) = table_assets(TRAINING_VS_INFERENCE)
