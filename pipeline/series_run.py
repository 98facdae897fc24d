"""The series engine as a step of the asset graph: one pass computes every series table the run
materializes.

power_1s, power_100ms and energy_curve stay three assets (their keys, cluster-day partitions,
checks and selection unchanged for users). The first of them to run in a Dagster run computes all
the series tables that run selects (:func:`pipeline.series.engine.write_parts`, one read of the
samples) and leaves the others' parts staged beside their final names, under a name no view
reads; each asset then installs its own part (rename, catalog) when its step runs, so a table
whose step does not run (an upstream ERROR check blocks it) keeps its previous part, as before.
A stale staged file (a run that died) is removed by ``warehouse.remove_stale_tmp``.

When the run also selects a step that reads whole curves (CURVE_READERS), the pass leaves each
GPU's curve in a cache of the run (pipeline/series/cache.py) that those steps read through
:func:`run_curves` instead of the raw files."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
from dagster import AssetExecutionContext, AssetKey, DagsterInvariantViolationError

from collectors.atomic import TMP_PREFIX, exclusive_lock
from pipeline import warehouse
from pipeline.resources import WarehouseResource
from pipeline.scope import Scope
from pipeline.series import SERIES_TABLES, series_table
from pipeline.series import cache as curve_cache
from pipeline.series.engine import write_parts

CURVE_READERS = ("phase_segments", "phase_intervals", "swing_stats", "fleet_power_grid")
"""The steps that read whole per-GPU curves (pipeline/phases/curve.py): a run selecting one of them
keeps its engine pass's curves for them."""


def staged_path(data_dir: Path, scope: Scope, table: str, run_id: str) -> Path:
    """Where run ``run_id`` leaves ``table``'s computed part until its asset installs it."""
    return scope.part_dir(data_dir, table) / f"{TMP_PREFIX}part-0.parquet.run-{run_id}"


@contextlib.contextmanager
def _scope_lock(data_dir: Path, scope: Scope) -> Iterator[None]:
    """One series step of a cluster-day at a time (two may run in parallel when power_1s is not
    selected): the second finds its part staged by the first."""
    with exclusive_lock(data_dir / ".duckdb_tmp" / f"series-{scope.date}-{scope.cluster or ''}.lock"):
        yield


def series_part(context: AssetExecutionContext, resource: WarehouseResource, con: duckdb.DuckDBPyConnection, scope: Scope, name: str) -> int:
    """Install ``name``'s part for ``scope``, computing it (and the run's other selected series
    tables, staged) unless an earlier step of this run did; returns its rows."""
    data_dir, run_id = resource.path, context.run.run_id
    selection = context.run.asset_selection or None  # a run of the whole job has an empty selection: every asset
    with _scope_lock(data_dir, scope):
        staged = staged_path(data_dir, scope, name, run_id)
        if not staged.exists():
            tables = [t for t in SERIES_TABLES if t.name == name or selection is None or AssetKey(t.name) in selection]
            paths = {t.name: staged_path(data_dir, scope, t.name, run_id) for t in tables}
            for path in paths.values():
                path.parent.mkdir(parents=True, exist_ok=True)

            keep = selection is None or any(AssetKey(n) in selection for n in CURVE_READERS)

            def one_pass() -> None:
                tmp = data_dir / ".duckdb_tmp"  # where DuckDB spills too
                cache = None
                if keep:
                    curve_cache.remove_stale(tmp)
                    cache = curve_cache.begin(run_id, tmp)
                try:
                    with tempfile.TemporaryDirectory(prefix="series-", dir=tmp) as folder:
                        write_parts(con, tables, paths, str(scope.date), Path(folder), cache)
                except BaseException:
                    curve_cache.drop(run_id)
                    raise

            try:
                one_pass()
            except (duckdb.Error, OSError, pa.ArrowException):  # DuckDB's errors come through the Arrow stream as OSError
                if not resource.quarantine_damaged(con, scope):
                    raise
                one_pass()  # over the views the quarantine redefined
        rows = warehouse.install_part(con, data_dir, series_table(name).name, scope, staged)
    resource.publish_part(name, scope)
    return rows


def run_curves() -> curve_cache.CurveCache | None:
    """The curves the engine pass of the Dagster run now executing left (None outside a run, or
    when its pass did not run or kept none)."""
    try:
        run_id = AssetExecutionContext.get().run.run_id
    except DagsterInvariantViolationError:
        return None
    return curve_cache.of_run(run_id)
