"""Write docs/columns.md from the column declarations: ``python -m pipeline.columns_doc``.

(Apart from pipeline/columns.py, which the catalog uses, because it loads the Dagster code
location for each table's description.)"""

from __future__ import annotations

from pipeline import definitions
from pipeline.columns import REFERENCE, render_reference
from pipeline.constants import SQL_DIR


def table_descriptions() -> dict[str, str]:
    """Each derived table's description, from its declaration in pipeline/assets/."""
    out = {}
    for spec in definitions.defs.resolve_all_asset_specs():
        name = spec.key.path[-1]
        if len(spec.key.path) == 1 and (SQL_DIR / name).is_dir() and spec.description:
            out[name] = spec.description.split("\n\n")[0]
    return out


def reference() -> str:
    return render_reference(table_descriptions())


def main() -> None:
    REFERENCE.write_text(reference())
    print(REFERENCE)


if __name__ == "__main__":
    main()
