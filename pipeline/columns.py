"""What each column of the warehouse means, declared once.

A derived table's columns, in order, with their unit and meaning, live beside its SQL in
``sql/<table>/columns.yaml``; a column left empty there takes the common meaning of
``sql/views/columns.yaml`` (``date``, ``level``, ``entity``, ``host``...), which also holds the
raw datasets' columns and a line on each helper view of ``sql/views/``. The same declarations
become the asset's ``dagster/column_schema`` (pipeline/tables.py), ``COMMENT ON`` in the catalog
(pipeline/warehouse.py: ``describe`` in ``wattline sql`` and ``duckdb_columns()`` show them) and
the column reference ``docs/columns.md`` (pipeline/columns_doc.py).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import yaml

from pipeline.constants import REPO_ROOT, SQL_DIR
from pipeline.sqltext import literal

COMMON_FILE = SQL_DIR / "views" / "columns.yaml"
REFERENCE = REPO_ROOT / "docs" / "columns.md"


class ColumnsError(ValueError):
    """A columns.yaml that does not say what a column means."""


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    meaning: str

    @property
    def comment(self) -> str:
        """The text ``COMMENT ON COLUMN`` and the UI show: the meaning, then the unit."""
        return f"{self.meaning} ({self.unit})" if self.unit else self.meaning


def _entry(name: str, value: Any, where: str) -> Column:
    if not isinstance(value, dict) or not str(value.get("meaning") or "").strip():
        raise ColumnsError(f"{where}: column {name} has no meaning")
    return Column(name, str(value.get("unit") or ""), str(value["meaning"]).strip())


@functools.cache
def _shared() -> dict[str, Any]:
    return yaml.safe_load(COMMON_FILE.read_text()) or {}


@functools.cache
def common() -> dict[str, Column]:
    return {name: _entry(name, value, str(COMMON_FILE)) for name, value in (_shared().get("common") or {}).items()}


def _resolve(columns: dict[str, Any], where: str) -> tuple[Column, ...]:
    out = []
    for name, value in columns.items():
        if value is None:
            if name not in common():
                raise ColumnsError(f"{where}: column {name} is empty and has no common meaning in {COMMON_FILE.name}")
            out.append(common()[name])
        else:
            out.append(_entry(name, value, where))
    return tuple(out)


def columns_file(table: str):
    return SQL_DIR / table / "columns.yaml"


@functools.cache
def table_columns(table: str) -> tuple[Column, ...]:
    """The declared columns of a derived table (empty when it has no ``columns.yaml``)."""
    path = columns_file(table)
    if not path.exists():
        return ()
    data = yaml.safe_load(path.read_text()) or {}
    return _resolve(data.get("columns") or {}, str(path))


@functools.cache
def other_columns(section: str) -> dict[str, tuple[str, tuple[Column, ...]]]:
    """The raw datasets (``raw``) or the catalog's other tables (``catalog``): each one's
    one-line description and columns."""
    return {
        name: (str(spec.get("doc") or ""), _resolve(spec.get("columns") or {}, f"{COMMON_FILE} {section}.{name}"))
        for name, spec in (_shared().get(section) or {}).items()
    }


@functools.cache
def _others() -> dict[str, tuple[str, tuple[Column, ...]]]:
    """The raw datasets and the catalog's other tables, merged once (asked once per relation)."""
    return {**other_columns("raw"), **other_columns("catalog")}


def declared(name: str) -> tuple[Column, ...]:
    """The declared columns of any table or view of the catalog (empty: none declared)."""
    return table_columns(name) or _others().get(name, ("", ()))[1]


@functools.cache
def helper_views() -> dict[str, str]:
    """The helper views of ``sql/views/`` and what each is for."""
    return {str(k): str(v) for k, v in (_shared().get("helpers") or {}).items()}


def declared_tables() -> list[str]:
    return sorted(p.parent.name for p in SQL_DIR.glob("*/columns.yaml") if p.parent.name != "views")




@functools.cache
def table_docs() -> dict[str, str]:
    """Each derived table's description, read from its ``Table("name", "description", ...)``
    declaration in pipeline/assets/ without importing it (the catalog is built by processes that
    do not load the Dagster code location)."""
    out = {}
    for path in sorted((REPO_ROOT / "pipeline" / "assets").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Table":
                args = list(node.args) + [k.value for k in node.keywords if k.arg in ("name", "doc")]
                try:
                    name, doc = ast.literal_eval(args[0]), ast.literal_eval(args[1])
                except (IndexError, ValueError):
                    continue  # a description built at run time: no comment (a test names the relation)
                out[str(name)] = " ".join(str(doc).split())
    return out


def relation_doc(name: str) -> str:
    """What a relation of the catalog holds: a derived table's description (its declaration's), a
    raw dataset's or catalog table's ``doc``, a helper view's line."""
    others = _others()
    return table_docs().get(name) or (others[name][0] if name in others else "") or helper_views().get(name, "")


def comment_statements(relations: dict[str, list[str]], views: Collection[str] = ()) -> list[str]:
    """``COMMENT ON`` for the relations present (name → its columns; ``views``: which of them are
    views): the relation itself (:func:`relation_doc`) and each declared column of a derived
    table, raw dataset or catalog table. A column the declaration lacks gets no comment (a test
    names it); a declared column the relation lacks is skipped."""
    out = []
    for name, present in relations.items():
        doc = relation_doc(name)
        if doc:
            out.append(f"COMMENT ON {'VIEW' if name in views else 'TABLE'} {name} IS {literal(doc)}")
        names = set(present)
        for column in declared(name):
            if column.name in names:
                out.append(f"COMMENT ON COLUMN {name}.{column.name} IS {literal(column.comment)}")
    return out


def render_reference(tables: dict[str, str]) -> str:
    """docs/columns.md: every derived table (name → its one-line description) with its columns,
    then the raw datasets and the helper views."""
    lines = [
        "# Column reference",
        "",
        "<!-- Generated from sql/<table>/columns.yaml and sql/views/columns.yaml by",
        "     `python -m pipeline.columns_doc`; edit those files, not this one. -->",
        "",
        "What every column of the warehouse means, with its unit. The same text is in the catalog:",
        "`wattline sql \"describe power_1s\"` shows it in the `meaning` column, and",
        "`duckdb_columns()` in its `comment` column; the Dagster UI shows it on each asset's page.",
        "Units: W watts, J joules, kWh, s seconds, ms, ns, % percent (of the entity's provisioned",
        "power unless the meaning says otherwise), 0–1 a share, count, tokens. A null means nothing",
        "was measured, never 0. How the tables are computed: [metrics.md](metrics.md),",
        "[phases.md](phases.md), [serving.md](serving.md).",
        "",
        "Derived tables: " + ", ".join(f"[`{t}`](#{t})" for t in sorted(tables)) + ".",
        "",
    ]

    def table(columns: tuple[Column, ...]) -> list[str]:
        rows = ["| column | unit | meaning |", "|---|---|---|"]
        rows += [f"| `{c.name}` | {c.unit} | {c.meaning.replace('|', '/')} |" for c in columns]
        return rows + [""]

    for name in sorted(tables):
        lines += [f"## {name}", "", tables[name], "", *table(table_columns(name))]
    lines += ["## Raw datasets", "", "What the collectors and importers write ([data-contract.md](data-contract.md)).", ""]
    for name, (doc, columns) in other_columns("raw").items():
        lines += [f"### {name}", "", doc, "", *table(columns)]
    lines += ["## Inventory, quarantine and catalog tables", ""]
    for name, (doc, columns) in other_columns("catalog").items():
        lines += [f"### {name}", "", doc, "", *table(columns)]
    lines += [
        "## Helper views",
        "",
        "Views the tables' SQL shares (`sql/views/`); they read the partition day",
        "(`getvariable('partition_date')`), so in `wattline sql` they are empty or refuse to run",
        "unless that variable is set: query the tables above instead.",
        "",
        "| view | what it is |",
        "|---|---|",
        *[f"| `{name}` | {text} |" for name, text in helper_views().items()],
        "",
    ]
    return "\n".join(lines)
