"""Jobs: one partitioned job that materializes every asset of a day."""

from dagster import AssetSelection, define_asset_job


DAILY_JOB = "daily_job"

daily_job = define_asset_job(
    DAILY_JOB,
    selection=AssetSelection.all() - AssetSelection.groups("raw"),
    description="Every derived table (and the report) for one UTC day.",
)
