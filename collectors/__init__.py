"""Collectors, importers and the fleet simulator: everything that writes the raw Parquet datasets."""
