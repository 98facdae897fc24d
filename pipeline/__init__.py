"""The Dagster pipeline, the DuckDB warehouse and the `wattline` command."""
