"""`power_summary`: per entity, mean, tail, peak, energy, time above TDP and idle."""

from pipeline.tables import Table, table_assets

POWER_SUMMARY = Table(
    "power_summary",
    "Per entity and day: mean, p99, p99.9, max (W and % of provisioned), peak-to-average, "
    "energy (kWh), share of GPU-time above TDP and idle; series: whether the power columns are "
    "on instantaneous power or on the driver's 1 s average (a GPU whose best source is one).",
    "cluster-day",
    deps=["power_100ms", "fleet_power_100ms", "power_1s", "fleet_power_1s"],
    rollup=True,  # role and fleet rows, from the rolled-up series and the cluster-days' parts
    rollup_deps=["power_summary", ["fleet", "fleet_power_100ms"]],
)
power_summary, fleet_power_summary = table_assets(POWER_SUMMARY)
