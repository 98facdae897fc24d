"""Loads the SQL kept in ``sql/``: one query per derived table, shared macros in ``sql/views/``.

Queries read their parameters with ``getvariable('partition_date')`` (and ``data_dir``), so a
file runs unchanged in the DuckDB CLI after ``SET VARIABLE partition_date = DATE '2026-11-30'``.
"""

from __future__ import annotations

import functools

import duckdb

from pipeline.constants import SQL_DIR


@functools.cache
def query(name: str) -> str:
    """The text of ``sql/<name>.sql`` without its trailing semicolon."""
    path = SQL_DIR / f"{name}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no SQL file {path}")
    return path.read_text().strip().rstrip(";")


def table_names() -> list[str]:
    """Every derived table: a folder ``sql/<table>/`` with its column docs (``columns.yaml``), the
    SQL tables' beside their ``<table>.sql``, the series and Python tables' beside their checks
    and headline only. Rollups write the same names."""
    return sorted(p.parent.name for p in SQL_DIR.glob("*/columns.yaml") if p.parent.name != "views")


@functools.cache
def macros() -> tuple[str, ...]:
    """Every statement in ``sql/views/*.sql`` (macros and views shared by several queries)."""
    statements: list[str] = []
    for path in sorted((SQL_DIR / "views").glob("*.sql")):
        statements += split(path.read_text())
    return tuple(statements)


def split(text: str) -> list[str]:
    """The statements of a SQL text, each with its leading comments, split by DuckDB's own parser
    (so a semicolon inside a comment or a string does not cut a statement)."""
    return [st.query.strip().rstrip(";").strip() for st in duckdb.extract_statements(text)]
