"""Issue 21 item 7: inventory mistakes that crashed `run` or silently changed its numbers.

Each is refused before anything runs, with one `error:` line naming the file, the item (its
place in the YAML) and its line."""

from __future__ import annotations

import pytest
import yaml

from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error

DATE = "2026-11-30"


def _edit(inv: dict, case: str) -> dict:
    cluster = inv["fleets"][0]["clusters"][0]
    train, infer = cluster["hosts"]
    if case == "duplicate cluster":  # crashed `run` with Dagster's IntegrityError
        inv["fleets"][0]["clusters"].append({"name": cluster["name"], "hosts": [train]})
        cluster["hosts"] = [infer]
    elif case == "duplicate GPU index":  # double-counted provisioned power
        infer["gpus"][1]["index"] = 0
        infer["endpoints"][0]["gpus"] = [0]
    elif case == "assignment of a GPU the host lacks":  # would give nobody's power to ep-a
        inv["assignments"] = [{"host": "infer-0", "gpu": 9, "endpoint": "ep-a"}]
    elif case == "assignment of an unknown endpoint":
        inv["assignments"] = [{"host": "infer-0", "gpu": 0, "endpoint": "ep-z"}]
    elif case == "infinite TDP":
        infer["gpus"][0]["tdp_w"] = float("inf")
    elif case == "NaN provisioned power":
        cluster["provisioned_w"] = float("nan")
    return inv


CASES = {
    "duplicate cluster": ("fleets[0].clusters[1].name (line ", "cluster name 'c0' appears twice"),
    "duplicate GPU index": ("hosts[1].gpus[1].index (line ", "lists GPU index 0 more than once"),
    "assignment of a GPU the host lacks": ("assignments[0] (line ", "GPU 9 of host 'infer-0' is not in the inventory"),
    "assignment of an unknown endpoint": ("assignments[0].endpoint (line ", "no endpoint named 'ep-z' in the inventory"),
    "infinite TDP": ("hosts[1].gpus[0].tdp_w (line ", "finite number"),
    "NaN provisioned power": ("fleets[0].clusters[0].provisioned_w (line ", "finite number"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_inventory_mistake_is_one_line(tmp_path, case):
    write_square_fleet(tmp_path, seconds=1)
    inv = yaml.safe_load((tmp_path / "inventory.yaml").read_text())
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(_edit(inv, case), sort_keys=False))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = invoke("run", "--date", DATE, "--data-dir", str(tmp_path))
    one_line_error(result, "inventory.yaml: ", *CASES[case])
    line = int(result.output.split("(line ", 1)[1].split(")", 1)[0])
    assert 1 <= line <= len((tmp_path / "inventory.yaml").read_text().splitlines())
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing ran
