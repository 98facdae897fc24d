"""Each asset's page says what its table is: the column schema with units and meanings, the warehouse
view it is read through and its docs; a name that appears twice says why; groups depend one way;
docs/columns.md is the reference generated from the declarations, and it is current."""

from __future__ import annotations

import graphlib

from dagster import AssetKey

from pipeline import columns
from pipeline.columns_doc import reference
from pipeline.definitions import defs
from pipeline.tables import ROLLUP_PREFIX


def specs():
    return {spec.key: spec for spec in defs.resolve_all_asset_specs()}


def tables() -> list[AssetKey]:
    return [k for k in specs() if columns.columns_file(k.path[-1]).exists()]


def test_every_table_asset_shows_its_columns_with_units_its_view_and_its_docs():
    found = specs()
    keys = tables()
    assert len(keys) >= 25  # the tables and their fleet/ rollups
    for key in keys:
        name = key.path[-1]
        metadata = found[key].metadata
        schema = metadata["dagster/column_schema"]
        assert [c.name for c in schema.columns] == [c.name for c in columns.table_columns(name)], key
        assert all(c.description for c in schema.columns), key
        assert metadata["warehouse view"].text.startswith(name), key
        assert metadata["docs"].path == f"docs/columns.md#{name}", key
    power = {c.name: c for c in found[AssetKey("power_1s")].metadata["dagster/column_schema"].columns}
    assert (power["mean_w"].type, power["mean_w"].description) == ("W", "mean of the GPU's best-source samples in the second")


def test_a_name_twice_says_why_in_its_description():
    found = specs()
    by_name: dict[str, list[AssetKey]] = {}
    for key in found:
        by_name.setdefault(key.path[-1], []).append(key)
    twice = {name: keys for name, keys in by_name.items() if len(keys) > 1}
    assert twice, "the rollups share their table's name"
    for keys in twice.values():
        for key in keys:
            if key.path[0] == ROLLUP_PREFIX:
                assert f"hence the same name under `{ROLLUP_PREFIX}/`" in found[key].description, key


def test_groups_depend_on_each_other_one_way():
    graph = defs.resolve_asset_graph()
    group = {k: graph.get(k).group_name for k in graph.get_all_asset_keys()}
    edges: dict[str, set[str]] = {g: set() for g in group.values()}
    for key in graph.get_all_asset_keys():
        for parent in graph.get(key).parent_keys:
            if group[parent] != group[key]:
                edges[group[key]].add(group[parent])
    both_ways = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, ()) and a < b)
    assert not both_ways, both_ways
    graphlib.TopologicalSorter(edges).prepare()  # raises CycleError on a longer loop


def test_docs_columns_md_is_generated_from_the_declarations_and_current():
    assert columns.REFERENCE.read_text() == reference(), "docs/columns.md is stale: run `.venv/bin/python -m pipeline.columns_doc`"

