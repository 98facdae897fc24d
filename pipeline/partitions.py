"""The daily partitions every asset shares (UTC days)."""

from dagster import DailyPartitionsDefinition

from pipeline.constants import START_DATE

daily_partitions = DailyPartitionsDefinition(start_date=START_DATE, end_offset=1)
