"""Issue 21, property: random names through every entry point that takes a name that becomes a
path segment: an inventory's host and cluster (`simulate --fleet FILE`, then `sql` on what it
wrote) and `import nvidia-smi --host`.

For every name: nothing is written outside the data dir (a snapshot of the parent folder before
and after), and the command ends with exit 0 or exactly one `error:` line (exit 2). Exit 0 only
for names that follow the rule of collectors/names.py, and then the name is exactly one folder
below the dataset's day folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from collectors.names import MAX_NAME_CHARS, path_name_problem
from tests.cli_util import invoke

DATE = "2026-11-30"
SPECIAL = list("/\\.=*?[]{}'\" \t\n\x00,:;$~%é中-_") + ["..", "../", "/..", "%2e%2e"]

names = st.one_of(
    st.lists(st.sampled_from(SPECIAL + list("aZ09")), max_size=12).map("".join),
    st.sampled_from(["", ".", "..", "/", "x/../../../ESCAPED", "..\\..\\E", "node=7", "o'brien=1", "d*", "d[1]", "a\x00b",
                     "a" * MAX_NAME_CHARS, "a" * (MAX_NAME_CHARS + 1), "h" * 4000, "Ωmega-7", "-v", "--help", "host.example.org"]),
    st.text(max_size=40),
)
valid = st.from_regex(r"[A-Za-z0-9\u00c0-\u024f][A-Za-z0-9._\u00c0-\u024f-]{0,30}", fullmatch=True)
"""Names that follow the rule: the success path, so that it is exercised as often as the refusals."""
any_name = st.one_of(valid, names)


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_outcome(result, name: str) -> bool:
    """Exit 0 (and a valid name) or one `error:` line with exit 2; returns whether it succeeded."""
    assert "Traceback" not in result.output, result.output
    event("accepted" if result.exit_code == 0 else "refused")
    if result.exit_code == 0:
        assert path_name_problem(name) is None, f"{name!r} was accepted: {result.output}"
        return True
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, result.output)
    assert path_name_problem(name) is not None, f"{name!r} follows the rule but was refused: {lines[0]}"
    return False


def only_inside(parent: Path, data: Path, before: set[str]) -> None:
    new = snapshot(parent) - before
    assert {p for p in new if p.split(os.sep)[0] != data.name} == set(), new


@pytest.mark.slow  # 34 fleets, each simulated and queried through the CLI
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(host=any_name, cluster=any_name)
@example(host="node-7.rack_2", cluster="c0")
@example(host="Ωmega-7", cluster="中文")
@example(host="h/../../../../../ESCAPED-HOST", cluster="c0")
@example(host="h0", cluster="x/../../../../../ESCAPED-CLUSTER")
def test_inventory_names_through_simulate_and_sql(host, cluster):
    if host == cluster:
        cluster = cluster + "c"
    with tempfile.TemporaryDirectory(prefix="names-") as tmp:
        parent = Path(tmp)
        fleet = parent / "fleet.yaml"
        fleet.write_text(yaml.safe_dump({"fleets": [{"name": "f", "clusters": [{"name": cluster, "hosts": [
            {"name": host, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}], "endpoints": [{"name": "Qwen/Qwen3-8B", "gpus": [0]}]},
        ]}]}]}))
        data = parent / "data"
        before = snapshot(parent)
        result = invoke("simulate", "--fleet", str(fleet), "--start", DATE, "--hours", "0.002", "--data-dir", str(data))
        ok = assert_outcome(result, host if path_name_problem(host) else cluster)
        only_inside(parent, data, before)
        if not ok:
            assert snapshot(parent) == before  # a refused name writes nothing at all
            return
        assert {p.parent.name for p in data.rglob("*.parquet") if p.parts[-4] == "power"} == {f"host={host}"}
        counted = invoke("sql", "select count(distinct host) as n from power", "--format", "csv", "--data-dir", str(data))
        assert counted.exit_code == 0 and counted.output.splitlines()[-1] == "1", counted.output
        only_inside(parent, data, before)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(host=any_name)
@example(host="node-7")
@example(host="x/../../../../SMI-ESCAPE")
@example(host="")
def test_import_nvidia_smi_host(host):
    with tempfile.TemporaryDirectory(prefix="names-") as tmp:
        parent = Path(tmp)
        log = parent / "smi.csv"
        log.write_text("timestamp, index, power.draw [W]\n2026/11/30 10:00:00.000, 0, 100.0 W\n")
        data = parent / "data"
        before = snapshot(parent)
        result = invoke("import", "nvidia-smi", str(log), "--host", host, "--tz", "UTC", "--data-dir", str(data))
        ok = assert_outcome(result, host)
        only_inside(parent, data, before)
        if ok:
            assert [p.parent.relative_to(data).as_posix() for p in data.rglob("*.parquet")] == [f"power/date={DATE}/host={host}"]
        else:
            assert snapshot(parent) == before
