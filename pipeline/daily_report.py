"""The daily report as the last asset of the day: after every other derived table, it writes
``reports/out/D.html`` (self-contained), a PNG per chart and ``D.json`` (see ``reports/daily.py``).

An entry point (above ``reports/``, which reads the pipeline's tables): pipeline/definitions.py
loads it beside the tables of ``pipeline.assets``. Its upstream assets are found, not listed:
every materializable asset of ``pipeline.assets`` (raw observable sources left out), so a table
that lands later is waited for without touching this file, and a missing one is simply not there.
"""


import importlib
import pkgutil
from pathlib import Path
from typing import Any

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, MaterializeResult, MetadataValue, asset

import pipeline.assets
from pipeline import readonly
from pipeline.partitions import daily_partitions
from pipeline.resources import WarehouseResource
from pipeline.warehouse import refresh_deferred

RAW_GROUP = "raw"


def upstream_asset_keys() -> list[AssetKey]:
    """Keys of every materializable asset in the ``pipeline.assets`` modules."""
    keys: set[AssetKey] = set()
    for info in pkgutil.iter_modules(pipeline.assets.__path__):
        module = importlib.import_module(f"{pipeline.assets.__name__}.{info.name}")
        for obj in vars(module).values():
            candidates = obj if type(obj) in (list, tuple) else [obj]
            for item in candidates:
                if not isinstance(item, AssetsDefinition) or not item.is_materializable:
                    continue
                for key in item.keys:
                    if item.group_names_by_key.get(key) != RAW_GROUP:
                        keys.add(key)
    return sorted(keys, key=lambda k: k.to_user_string())


@asset(
    partitions_def=daily_partitions,
    deps=upstream_asset_keys(),
    group_name="report",
    kinds={"html", "altair"},
)
def daily_report(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    """The day's report: headline, fleet power, swings, inference phases, correlation, diurnal
    profile, data quality. Output dir and PNGs: the resource's ``reports_dir`` and ``report_png``
    ($WATTLINE_REPORTS_DIR, else the repo's reports/out; $WATTLINE_REPORT_PNG), resolved where the
    run started. Sections whose table does not exist yet say "not available yet"."""
    from reports.daily import build_report  # altair, ~0.4 s CPU: not for a process that builds no report

    date = context.partition_key
    readonly.set_limits(warehouse.duckdb_memory or None, warehouse.duckdb_threads or None)  # the run's bound for the report's reads
    refresh_deferred()  # the catalog it reads holds the tables this run wrote
    report = build_report(warehouse.path, date, Path(warehouse.reports_dir), png=warehouse.report_png, instance=context.instance)
    partial = {s.key: s.missing for s in report.sections if s.missing}
    errors = {s.key: s.error for s in report.sections if s.error}
    for key, error in errors.items():
        context.log.error(f"report section {key} failed: {error}")
    headline = report.headline
    metadata: dict[str, Any] = {
        "html": MetadataValue.path(str(report.html_path)),
        "json": MetadataValue.path(str(report.json_path)),
        "html_bytes": report.html_path.stat().st_size,
        "charts": len(report.points),
        "max_points_per_chart": max(report.points.values(), default=0),
        "pngs": len(report.pngs),
        "sections_complete": sum(1 for s in report.sections if not s.missing and not s.error),
        "not_available": MetadataValue.json(partial),
        "seconds": round(report.seconds, 1),
    }
    if "fleet_energy_kwh" in headline:
        metadata["fleet_energy_kwh"] = headline["fleet_energy_kwh"]
    if errors:
        metadata["section_errors"] = MetadataValue.json(errors)
    return MaterializeResult(metadata=metadata)
