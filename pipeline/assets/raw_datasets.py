"""The raw Parquet datasets written by collectors, importers and the simulator, as observable sources."""


import hashlib
import warnings

from dagster import BetaWarning, DataVersion, ObserveResult, observable_source_asset

from collectors.contract import DATASETS
from pipeline.datadir import raw_files
from pipeline.resources import WarehouseResource


def _observe(name: str):
    with warnings.catch_warnings():  # Dagster has no non-beta way to observe an asset it does not materialize
        warnings.filterwarnings("ignore", "Function `observable_source_asset` is currently in beta", BetaWarning)
        return _observable(name)


def _observable(name: str):
    @observable_source_asset(
        name=name,
        group_name="raw",
        description=f"Raw `{name}` Parquet dataset ({DATASETS[name].glob()} under the data dir); see docs/data-contract.md.",
    )
    def _asset(warehouse: WarehouseResource):
        files = raw_files(warehouse.path, name)
        stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
        digest = hashlib.sha256(repr(stats).encode()).hexdigest()[:16]
        return ObserveResult(
            data_version=DataVersion(digest),
            metadata={"files": len(files), "bytes": sum(s[1] for s in stats)},
        )

    return _asset


raw_assets = [_observe(name) for name in DATASETS]
