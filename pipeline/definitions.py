"""The Dagster code location: assets (every module in ``pipeline.assets``), jobs, schedule, sensor."""

from __future__ import annotations

import importlib
import pkgutil

from dagster import Definitions, load_asset_checks_from_modules, load_assets_from_modules

import pipeline.assets
from pipeline.jobs import build_jobs
from pipeline.resources import WarehouseResource
from pipeline.schedules import daily_schedule
from pipeline.sensors import new_parquet_sensor


def _asset_modules():
    return [
        importlib.import_module(f"pipeline.assets.{info.name}")
        for info in pkgutil.iter_modules(pipeline.assets.__path__)
    ]


def build_definitions(data_dir: str = "") -> Definitions:
    modules = _asset_modules()
    assets = load_assets_from_modules(modules)
    return Definitions(
        assets=assets,
        asset_checks=load_asset_checks_from_modules(modules),
        jobs=list(build_jobs(assets)),
        schedules=[daily_schedule],
        sensors=[new_parquet_sensor],
        resources={"warehouse": WarehouseResource(data_dir=data_dir)},
    )


defs = build_definitions()
