"""The catalog after each part: warehouse.duckdb is replaced only when what it holds changes.

A derived view reads every part of its table, so a new part of a known table needs no new catalog;
a table's first part, new columns, a changed inventory or job_events file, a table gone or a
catalog that is not the one last written do. Each case is held against what a reader sees and,
where the catalog was extended rather than rebuilt, against a whole rebuild of the same data dir.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from collectors.contract import JOB_EVENTS
from collectors.parquet_sink import write_dataset
from pipeline import columns, warehouse
from pipeline.constants import warehouse_path
from pipeline.resources import WarehouseResource
from tests.builders import day_start_ns, power_table, square_wave, two_host_inventory

DATE = "2026-11-30"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An inventory of two hosts and one minute of one GPU's samples: enough for every view."""
    d = tmp_path / "data"
    two_host_inventory(d)
    t, p = square_wave(60, 4.0, 100.0, 700.0)
    write_dataset(power_table("train-0", 0, t, p), d, "power", prefix="train-0-0")
    return d


def _write(d: Path, table: str, sql: str) -> int:
    """Write ``table``'s part for DATE the way an asset does (write, then publish the part)."""
    resource = WarehouseResource(data_dir=str(d))
    with resource.connection(DATE) as con:
        return resource.write_and_publish(con, table, DATE, sql)


def _rows(n: int, extra: str = "") -> str:
    return f"SELECT DATE '{DATE}' AS date, 'train-0' AS host, i::UTINYINT AS gpu{extra} FROM range({n}) t(i)"


def _catalog_file(d: Path) -> tuple[int, int]:
    st = warehouse_path(d).stat()
    return st.st_ino, st.st_mtime_ns


def _read(d: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(warehouse_path(d)), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


_DESCRIBED = (
    "SELECT 'column', table_name, column_name, data_type, comment FROM duckdb_columns() WHERE NOT internal "
    "UNION ALL SELECT 'view', view_name, NULL, NULL, comment FROM duckdb_views() WHERE NOT internal "
    "UNION ALL SELECT 'table', table_name, NULL, NULL, comment FROM duckdb_tables() WHERE NOT internal ORDER BY ALL"
)
"""Every relation and column of a catalog with its type and comment."""


def _same_as_rebuilt(d: Path, tmp_path: Path) -> None:
    """The catalog in place describes the same relations, columns and comments as a whole rebuild."""
    kept = _read(d, _DESCRIBED)
    copy = tmp_path / "rebuilt"
    shutil.copytree(d, copy)
    # The copy's catalog is built for the copy's path: only the data_dir it names may differ.
    warehouse.publish(copy)
    assert kept == _read(copy, _DESCRIBED)


def test_a_new_part_of_a_known_table_leaves_the_catalog_file_as_it_is(data_dir):
    assert _write(data_dir, "power_1s", _rows(2)) == 2
    before = _catalog_file(data_dir)
    assert _write(data_dir, "power_1s", _rows(3)) == 3
    assert _catalog_file(data_dir) == before
    assert _read(data_dir, "SELECT count(*) FROM power_1s") == [(3,)]  # the view reads the new part


def test_a_new_table_is_in_the_catalog_as_soon_as_its_first_part_lands(data_dir, tmp_path):
    _write(data_dir, "power_1s", _rows(2))
    assert not _read(data_dir, "SELECT * FROM duckdb_views() WHERE view_name = 'power_summary'")
    _write(data_dir, "power_summary", f"SELECT DATE '{DATE}' AS date, 'host' AS level, 'train-0' AS entity")
    assert _read(data_dir, "SELECT level, entity FROM power_summary") == [("host", "train-0")]
    assert _read(data_dir, "SELECT comment FROM duckdb_views() WHERE view_name = 'power_summary'") == [
        (columns.relation_doc("power_summary"),)
    ]
    _same_as_rebuilt(data_dir, tmp_path)


def test_new_columns_of_a_known_table_get_their_comments(data_dir, tmp_path):
    _write(data_dir, "power_1s", _rows(2))
    before = _catalog_file(data_dir)
    _write(data_dir, "power_1s", _rows(2, ", 1.5 AS mean_w"))
    assert _catalog_file(data_dir) != before
    (comment,) = _read(data_dir, "SELECT comment FROM duckdb_columns() WHERE table_name = 'power_1s' AND column_name = 'mean_w'")[0]
    assert comment == {c.name: c.comment for c in columns.table_columns("power_1s")}["mean_w"]
    _same_as_rebuilt(data_dir, tmp_path)


def test_a_changed_inventory_rebuilds_the_catalog(data_dir):
    _write(data_dir, "power_1s", _rows(2))
    assert _read(data_dir, "SELECT count(*) FROM inventory_gpus") == [(4,)]
    two_host_inventory(data_dir, gpus_per_host=3)
    _write(data_dir, "power_1s", _rows(2))
    assert _read(data_dir, "SELECT count(*) FROM inventory_gpus") == [(6,)]


def test_a_new_job_events_file_rebuilds_gpu_assignments(data_dir):
    _write(data_dir, "power_1s", _rows(2))
    held = "SELECT count(*) FROM gpu_assignments WHERE host = 'train-0' AND source = 'job_events'"
    assert _read(data_dir, held) == [(0,)]
    start = day_start_ns()
    events = pa.table({
        "job": ["job-a"], "host": ["train-0"], "kind": ["step"], "start_ts": pa.array([start], pa.timestamp("ns", "UTC")),
        "end_ts": pa.array([start + 600 * 10**9], pa.timestamp("ns", "UTC")),
    })
    events = pa.table({f.name: events[f.name] if f.name in events.column_names else pa.nulls(1, f.type) for f in JOB_EVENTS}).cast(JOB_EVENTS)
    write_dataset(events, data_dir, "job_events", prefix="sched")
    _write(data_dir, "power_1s", _rows(2))
    assert _read(data_dir, held)[0][0] > 0


def test_a_catalog_replaced_behind_the_writers_back_is_rebuilt(data_dir):
    _write(data_dir, "power_1s", _rows(2))
    warehouse_path(data_dir).write_bytes(b"not a catalog")
    _write(data_dir, "power_1s", _rows(2))
    assert warehouse.catalog_problem(data_dir) is None


def test_a_copied_data_dir_gets_its_own_catalog_at_the_next_part(data_dir, tmp_path):
    _write(data_dir, "power_1s", _rows(2))
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    assert warehouse.catalog_problem(copy) is not None
    _write(copy, "power_1s", _rows(2))
    assert warehouse.catalog_problem(copy) is None


def test_a_table_whose_parts_are_gone_leaves_the_catalog(data_dir):
    _write(data_dir, "power_1s", _rows(2))
    _write(data_dir, "power_summary", f"SELECT DATE '{DATE}' AS date, 'host' AS level, 'train-0' AS entity")
    shutil.rmtree(data_dir / "derived" / "power_summary")
    _write(data_dir, "power_1s", _rows(2))
    assert not _read(data_dir, "SELECT * FROM duckdb_views() WHERE view_name = 'power_summary'")


def test_a_data_dir_named_with_a_question_mark_gets_its_new_tables(tmp_path):
    """DuckDB takes a ``?`` in a database path for URL parameters: the copy a new view is added
    to is edited in the system's temporary folder, as a whole rebuild is."""
    d = tmp_path / "d?x"
    two_host_inventory(d)
    _write(d, "power_1s", _rows(2))
    _write(d, "power_summary", f"SELECT DATE '{DATE}' AS date, 'host' AS level, 'train-0' AS entity")
    assert _read(d, "SELECT (SELECT count(*) FROM power_1s), (SELECT count(*) FROM power_summary)") == [(2, 1)]
    assert warehouse.catalog_problem(d) is None


def test_publish_rebuilds_whatever_the_state_says(data_dir):
    _write(data_dir, "power_1s", _rows(2))
    before = _catalog_file(data_dir)
    warehouse.publish(data_dir)
    assert _catalog_file(data_dir) != before


@pytest.mark.slow  # two runs of the daily job
def test_a_run_builds_the_catalog_once_and_its_rerun_not_at_all(tmp_path, monkeypatch):
    from pipeline.runner import run_day
    from tests.builders import write_square_fleet

    d = tmp_path / "data"
    write_square_fleet(d, seconds=30)
    builds = []
    build = warehouse._build_catalog
    monkeypatch.setattr(warehouse, "_build_catalog", lambda tmp, data_dir: builds.append(tmp) or build(tmp, data_dir))
    selection = ["power_1s", "power_100ms"]
    outcome = run_day(d, DATE, selection=selection)
    assert outcome.success, outcome.error
    assert len(builds) == 1  # the first part's; the second table's view is added to a copy
    assert {name for (name,) in _read(d, "SELECT view_name FROM duckdb_views()")} >= set(selection)
    before = _catalog_file(d)
    assert run_day(d, DATE, selection=selection).success
    assert len(builds) == 1 and _catalog_file(d) == before
    assert _read(d, "SELECT count(*) > 0 FROM power_100ms") == [(True,)]


def test_statements_run_as_one_script_stay_apart_after_a_trailing_comment():
    """The shared macros and the comments run as one script: a statement ending in a ``--``
    comment must not swallow the next one."""
    con = duckdb.connect()
    warehouse._execute_all(con, ["CREATE TABLE a AS SELECT 1 AS x -- the first", "CREATE TABLE b AS SELECT 2 AS x"])
    assert con.execute("SELECT (SELECT x FROM a), (SELECT x FROM b)").fetchall() == [(1, 2)]
