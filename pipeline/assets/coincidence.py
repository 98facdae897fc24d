"""`coincidence`: per power domain, the peak of the sum against the sum of its members' peaks (how
much the members' spikes cancel out)."""

from pipeline.tables import Table, table_assets

COINCIDENCE = Table(
    "coincidence",
    "Per host, cluster, role and fleet (members: their GPUs) and day, on 1 s power: coincidence "
    "factor (peak of the sum ÷ sum of the GPUs' peaks) and smoothing ratio.",
    "cluster-day",
    deps=["power_1s", "fleet_power_1s"],
    rollup=True,  # role and fleet rows from the cluster-days' member sums and the rolled-up 1 s series
    rollup_deps=["coincidence", ["fleet", "fleet_power_1s"]],
)
coincidence, fleet_coincidence = table_assets(COINCIDENCE)
