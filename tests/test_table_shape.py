"""One shape for every table (pipeline/tables.py): every SQL folder is declared once, every check
file says its severity and description, and a check fails exactly when its query returns rows."""

import contextlib
from types import SimpleNamespace

import duckdb
import pytest
from dagster import AssetCheckSeverity

from pipeline.constants import SQL_DIR
from pipeline.definitions import defs
from pipeline.series import SERIES_TABLES
from pipeline.tables import SqlCheck, Table, headline, parse_check, table_dir

TABLE_FOLDERS = sorted(p.parent.name for p in SQL_DIR.glob("*/columns.yaml") if p.parent.name != "views")


def _declared() -> dict[str, Table]:
    import importlib
    import pkgutil

    import pipeline.assets

    found: dict[str, Table] = {}
    for info in pkgutil.iter_modules(pipeline.assets.__path__):
        module = importlib.import_module(f"pipeline.assets.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Table):
                assert value.name not in found, f"{value.name} declared twice"
                found[value.name] = value
    return found


def test_every_table_folder_is_declared_once_and_becomes_its_assets():
    declared = _declared()
    assert TABLE_FOLDERS, "no sql/<table>/columns.yaml found"
    assert set(TABLE_FOLDERS) == set(declared), f"undeclared: {set(TABLE_FOLDERS) - set(declared)}, no folder: {set(declared) - set(TABLE_FOLDERS)}"
    keys = {k.to_user_string() for a in defs.assets for k in getattr(a, "keys", [])}
    for table in declared.values():
        assert table.name in keys
        assert (f"fleet/{table.name}" in keys) == table.rollup
        # one implementation each: the series engine's function, a Python function, or the query file
        query_file = (table_dir(table.name) / f"{table.name}.sql").exists()
        assert [table.series, table.rows is not None, query_file].count(True) == 1, table.name
        if query_file:
            assert table.sql_name() == f"{table.name}/{table.name}"
    assert {t.name for t in declared.values() if t.series} == {t.name for t in SERIES_TABLES}


@pytest.mark.parametrize("path", sorted(SQL_DIR.glob("*/checks/*.sql")), ids=lambda p: f"{p.parent.parent.name}.{p.stem}")
def test_check_files_have_a_header(path):
    check = parse_check(path)
    assert check.severity in (AssetCheckSeverity.ERROR, AssetCheckSeverity.WARN)
    assert check.description and check.sql.lstrip().startswith(("--", "SELECT", "WITH"))
    assert check.name.isidentifier()


def test_a_check_fails_exactly_when_its_query_returns_rows(tmp_path):
    path = tmp_path / "checks" / "no_negative_power.sql"
    path.parent.mkdir()
    path.write_text(
        "-- severity: ERROR\n-- description: Power is never negative.\n-- failure: {n} negative sample(s): {list}\n"
        "SELECT host, w FROM t WHERE w < 0 ORDER BY host\n"
    )
    check = parse_check(path)
    assert isinstance(check, SqlCheck) and check.name == "no_negative_power" and check.rollup
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a', 10.0), ('b', 20.0)) AS v(host, w)")
    ok = check.run(con)
    assert ok.passed and ok.description is None and ok.metadata["violations"].value == 0
    con.execute("INSERT INTO t VALUES ('c', -1.0), ('d', -2.0)")
    bad = check.run(con)
    assert not bad.passed and bad.severity == AssetCheckSeverity.ERROR
    assert bad.description == "2 negative sample(s): c, d"


def test_header_without_severity_is_refused(tmp_path):
    path = tmp_path / "x.sql"
    path.write_text("-- description: something\nSELECT 1 WHERE false\n")
    with pytest.raises(ValueError, match="severity"):
        parse_check(path)


def test_headline_row_becomes_metadata(monkeypatch):
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('c1', 1.25), ('c2', 2.5)) AS v(entity, pct)")
    sql = "SELECT count(*) AS n, map_from_entries(list((entity, pct) ORDER BY entity)) AS pct, 37.5 AS reference FROM t"
    monkeypatch.setattr("pipeline.tables.headline_sql", lambda name: sql)
    meta = headline(con, "t")
    assert meta["n"] == 2 and meta["reference"] == 37.5
    assert meta["pct"].value == {"c1": 1.25, "c2": 2.5}


def test_table_dir_is_the_sql_folder():
    assert table_dir("power_headroom") == SQL_DIR / "power_headroom"


def test_tables_are_declared_without_hooks():
    """No step runs before a table's SQL or replaces its write: a table is its SQL file, its series
    function or its Python function (the phase and swing tables, which had such hooks, are Python
    tables), so a SQL file never reads a temp table a hook left."""
    from dataclasses import fields

    assert not {"before", "rollup_before", "write"} & {f.name for f in fields(Table)}
    declared = _declared()
    for name in ("phase_segments", "phase_intervals", "phase_timeline", "swing_stats", "fleet_power_grid", "swing_projection"):
        assert declared[name].rows is not None, name
        assert not (table_dir(name) / f"{name}.sql").exists(), name




class _Warehouse:
    """What Table.compute asks of the resource, on one in-memory connection of 4 threads; each
    write records the thread count its query ran with."""

    grid_step_ms = 100

    def __init__(self, fail: bool = False):
        self.con = duckdb.connect()
        self.con.execute("SET threads = 4")
        self.fail = fail
        self.write_threads: list[int] = []

    @contextlib.contextmanager
    def connection(self, scope, share=None):
        yield self.con

    def write_and_publish(self, con, table, scope, query):
        self.write_threads.append(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        if self.fail:
            raise duckdb.IOException("disk full")
        return len(con.execute(query).fetchall())

    def threads(self) -> int:
        return self.con.execute("SELECT current_setting('threads')").fetchall()[0][0]


@pytest.mark.parametrize("one_thread", [True, False])
def test_a_one_thread_sql_table_writes_its_part_on_one_thread_and_the_setting_comes_back(monkeypatch, one_thread):
    """Table(one_thread=True) (fleet_power_100ms): each thread's hash table held every slot of the
    day, so the part's query runs on one DuckDB thread; the database's thread count is the
    caller's again after it, also when the write fails. Other SQL tables keep the caller's threads."""
    monkeypatch.setattr("pipeline.tables.statements", lambda name: (["CREATE TEMP TABLE _t AS SELECT 1 AS x"], "FROM _t"))
    context = SimpleNamespace(partition_key="2026-11-30", run=SimpleNamespace(run_id="r"))
    table = Table("t_threads", "A SQL table.", "fleet-day", one_thread=one_thread)
    warehouse = _Warehouse()
    result = table.compute(context, warehouse, None, rollup=False)
    assert result.metadata is not None and result.metadata["rows"] == 1
    assert warehouse.write_threads == [1 if one_thread else 4]
    assert warehouse.threads() == 4

    failing = _Warehouse(fail=True)
    with pytest.raises(duckdb.IOException):
        table.compute(context, failing, None, rollup=False)
    assert failing.write_threads == [1 if one_thread else 4]
    assert failing.threads() == 4
