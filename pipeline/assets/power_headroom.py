"""`power_headroom`: how close each host and cluster runs to its provisioned power at 2 s, and
how many more hosts of the same profile a cluster could take (resampling observed host-days)."""

from dagster import Config

from pipeline.tables import Table, table_assets


class HeadroomConfig(Config):
    exceed_share: float = 0.001
    """Share of 2 s windows the cluster may spend above provisioned power after adding hosts."""


POWER_HEADROOM = Table(
    "power_headroom",
    "Per host and cluster and day: provisioned W, p99/p99.9/max of 2 s power, headroom %, and "
    "(clusters) how many more hosts of the same profile fit before 2 s power exceeds provisioned "
    "for more than `exceed_share` of the time, by resampling observed host-days (see "
    "docs/metrics.md and sql/power_headroom/power_headroom.sql).",
    "cluster-day",
    deps=["fleet_power_1s"],
    config=HeadroomConfig,
    variables=lambda config, _warehouse: {"headroom_exceed_share": config.exceed_share},
)
(power_headroom,) = table_assets(POWER_HEADROOM)
