"""The Dagster code location: assets (every module in ``pipeline.assets``), jobs, schedule, sensors.

The fleet-day assets carry ``AutomationCondition.eager()``: once a day's cluster-days are all
there (none missing, none in progress) and one of them changed, the fleet-day rebuilds
itself (days of the last week); the ``fleet_day_automation`` sensor evaluates that (on with the daemon, like the
schedule; ``WATTLINE_AUTOMATION=off`` starts it stopped)."""

from __future__ import annotations

import datetime as dt
import importlib
import pkgutil

from dagster import (
    AssetsDefinition,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    load_asset_checks_from_modules,
    load_assets_from_modules,
)

import pipeline.assets
from collectors.contract import DATASETS
from collectors.settings import Settings, load
from pipeline import daily_report
from pipeline.jobs import build_jobs, keys_partitioned_by
from pipeline.partitions import daily_partitions
from pipeline.remote import DataDir
from pipeline.resources import WarehouseResource
from pipeline.schedules import AUTOMATION_ON, daily_schedule
from pipeline.sensors import new_parquet_sensor


def _asset_modules():
    return [
        importlib.import_module(f"pipeline.assets.{info.name}")
        for info in pkgutil.iter_modules(pipeline.assets.__path__)
    ]


def build_definitions(data_dir: DataDir | None = None, settings: Settings | None = None) -> Definitions:
    """The code location on ``data_dir`` (None: the settings') for a run with ``settings`` (the
    warehouse resource's fields): an entry point, so None reads them from the environment now; the
    runner's worker processes pass theirs, with their share of threads and memory."""
    settings = settings if settings is not None else load()
    modules = [*_asset_modules(), daily_report]
    assets = [_follow_cluster_days(a) for a in load_assets_from_modules(modules)]
    fleet_day = AutomationConditionSensorDefinition(
        "fleet_day_automation",
        target=AssetSelection.assets(*keys_partitioned_by(assets, daily_partitions)),
        default_status=DefaultSensorStatus.RUNNING if AUTOMATION_ON else DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=60,
    )
    return Definitions(
        assets=assets,
        asset_checks=load_asset_checks_from_modules(modules),
        jobs=list(build_jobs(assets)),
        schedules=[daily_schedule],
        sensors=[new_parquet_sensor, fleet_day],
        resources={"warehouse": WarehouseResource.from_settings(settings, data_dir)},
    )


FOLLOW_DAYS = 7
"""How far back a late cluster-day still rebuilds its fleet-day by itself (older: by hand)."""


def fleet_day_condition() -> AutomationCondition:
    """Eager, but over the last week's days, not only the latest partition (which is today:
    the partitions end a day ahead so a day being collected can be built by hand)."""
    return (
        AutomationCondition.eager()
        .replace("in_latest_time_window", AutomationCondition.in_latest_time_window(lookback_delta=dt.timedelta(days=FOLLOW_DAYS)))
        # the raw datasets are observable sources (never "materialized"): a day checks its files when it runs
        .ignore(AssetSelection.assets(*DATASETS))  # type: ignore[attr-defined]  # eager() is an AndAutomationCondition
    )


def _follow_cluster_days(a):
    if isinstance(a, AssetsDefinition) and a.is_materializable and a.partitions_def == daily_partitions:
        return a.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=fleet_day_condition()))
    return a


defs = build_definitions()
"""The code location of `wattline ui` and `dagster dev`: the settings as the environment holds them
when it loads."""
