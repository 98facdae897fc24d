"""How load follows the day: `hourly_activity` reduces each day to 24 rows per role and endpoint;
`diurnal_profile` reads the trailing weeks of it and profiles power, requests, tokens and J per
output token by local hour (and day of week once 7 days exist)."""

from dagster import Config

from pipeline.constants import DIURNAL_TRAILING_DAYS
from pipeline.tables import Table, table_assets


class DiurnalConfig(Config):
    tz: str = "UTC"
    """IANA time zone whose local hours label the profile (e.g. America/Los_Angeles)."""
    trailing_days: int = DIURNAL_TRAILING_DAYS


HOURLY_ACTIVITY = Table(
    "hourly_activity",
    "Per role, inference endpoint and UTC hour: complete seconds, summed power, energy (J), "
    "a 1 s power histogram (bins of 0.1% of provisioned), requests, prompt and output tokens.",
    "cluster-day",
    deps=["power_1s", "fleet_power_1s", "requests"],
    rollup=True,  # the fleet-day part: role rows (endpoint rows are per cluster), same SQL
    rollup_deps=[["fleet", "fleet_power_1s"], "requests"],
)
hourly_activity, fleet_hourly_activity = table_assets(HOURLY_ACTIVITY)

DIURNAL_PROFILE = Table(
    "diurnal_profile",
    "Per role and endpoint by local hour (and day of week with ≥ 7 days) over the trailing days: "
    "mean, p5, p95 power (W), requests/s, prompt and output tokens/s, J per output token.",
    "fleet-day",
    # The day's hourly_activity, from every cluster and the fleet-day; the trailing days are read
    # as they are (a profile over fewer days is still a profile, so they do not block the day).
    deps=["hourly_activity", ["fleet", "hourly_activity"]],
    group="fleet",  # it reads fleet/ rollups: in their group, so groups depend on each other one way
    config=DiurnalConfig,
    variables=lambda config, _warehouse: {"diurnal_tz": config.tz, "diurnal_days": config.trailing_days},
)
(diurnal_profile,) = table_assets(DIURNAL_PROFILE)
