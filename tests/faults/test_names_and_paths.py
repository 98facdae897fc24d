"""Issue 21 items 1 and 8: names that become paths, data dirs whose own name holds glob or quote
characters, free-form names that must never become paths, and the UI's listener.

Every case checks the disk: nothing is written outside the data dir (a snapshot of the parent
folder before and after), and a refused name writes nothing at all.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from collectors.names import BadName, inside, inside_key
from pipeline import warehouse
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error

DATE = "2026-11-30"
ESCAPES = ["h/../../../../../ESCAPED", "x/../../../SMI-ESCAPE", "..", ".hidden", "node=7", "o'brien=1", "c*", "d[1]", "a b", "a\x00b", ""]


def snapshot(root: Path) -> set[str]:
    """Every file and folder under ``root`` (relative), to compare before and after a command."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def outside(parent: Path, data_dir: Path, before: set[str]) -> set[str]:
    """What appeared under ``parent`` but not under ``data_dir``."""
    mine = data_dir.relative_to(parent).parts[0]
    return {p for p in snapshot(parent) - before if p.split(os.sep)[0] != mine}


def tiny_fleet(host: str = "h0", cluster: str = "c0", endpoint: str = "ep-a") -> dict:
    return {"fleets": [{"name": "f", "clusters": [{"name": cluster, "hosts": [
        {"name": host, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}], "endpoints": [{"name": endpoint, "gpus": [0]}]},
    ]}]}]}


def smi_log(folder: Path) -> Path:
    path = folder / "smi.csv"
    path.write_text("timestamp, index, power.draw [W]\n2026/11/30 10:00:00.000, 0, 100.0 W\n2026/11/30 10:00:01.000, 0, 110.0 W\n")
    return path


@pytest.mark.parametrize("bad", ["h/../../../../../ESCAPED-HOST", "node=7", "o'brien=1", ".."])
def test_inventory_host_name_simulate(tmp_path, bad):
    """Fault: a fleet file names a host `h/../../../../../ESCAPED-HOST` (it wrote
    /tmp/ESCAPED-HOST/sim-gpu000.parquet), `node=7` (broke hive partitioning) or `o'brien=1`.
    Must survive: the disk (nothing written anywhere) and the user's understanding (one line naming
    the value and where it is in the file, with its line)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(tiny_fleet(host=bad)))
    data, before = tmp_path / "data", snapshot(tmp_path)
    result = invoke("simulate", "--fleet", str(fleet), "--start", DATE, "--hours", "0.01", "--data-dir", str(data))
    one_line_error(result, "fleets[0].clusters[0].hosts[0].name (line ", repr(bad))
    assert snapshot(tmp_path) == before


def test_inventory_cluster_name_run(tmp_path):
    """Fault: inventory.yaml names a cluster `x/../../../../../ESCAPED-CLUSTER` (`run` wrote
    <parent>/ESCAPED-CLUSTER/part-0.parquet) or `c*` (its views globbed other clusters' parts).
    Must survive: nothing written outside; one line from `run` and `sql`."""
    data = tmp_path / "data"
    write_square_fleet(data, seconds=1)
    inv = yaml.safe_load((data / "inventory.yaml").read_text())
    for bad in ("x/../../../../../ESCAPED-CLUSTER", "c*"):
        inv["fleets"][0]["clusters"][0]["name"] = bad
        (data / "inventory.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
        before = snapshot(tmp_path)
        one_line_error(invoke("run", "--date", DATE, "--data-dir", str(data)), "inventory.yaml: fleets[0].clusters[0].name (line ", repr(bad))
        one_line_error(invoke("sql", "select 1", "--data-dir", str(data)), "clusters[0].name", repr(bad))
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("bad", ["x/../../../SMI-ESCAPE", "", "node=7", "o'brien=1", "a*", "-v"])
def test_import_nvidia_smi_host(tmp_path, bad):
    """Fault: `import nvidia-smi FILE --host "x/../../../../SMI-ESCAPE"` wrote outside and exited 0;
    `--host ""` gave a traceback; `--host node=7` broke every later run of that day."""
    log = smi_log(tmp_path)
    data, before = tmp_path / "data", snapshot(tmp_path)
    one_line_error(invoke("import", "nvidia-smi", str(log), "--host", bad, "--tz", "UTC", "--data-dir", str(data)), "--host", repr(bad))
    assert snapshot(tmp_path) == before


def test_import_nvidia_smi_good_host_writes_inside(tmp_path):
    log = smi_log(tmp_path)
    data = tmp_path / "data"
    ok = invoke("import", "nvidia-smi", str(log), "--host", "node-7.rack_2", "--tz", "UTC", "--data-dir", str(data))
    assert ok.exit_code == 0, ok.output
    assert [p.parent.relative_to(data).as_posix() for p in data.rglob("*.parquet")] == [f"power/date={DATE}/host=node-7.rack_2"]


def test_collect_host_and_hostname(tmp_path, monkeypatch):
    """The collector's --host, and the machine's hostname it uses by default, follow the rule:
    a hostname that breaks it is one line telling the user to pass --host."""
    import socket

    data = tmp_path / "data"
    one_line_error(invoke("collect", "--host", "a/../../b", "--data-dir", str(data)), "--host", "contains '/'")
    monkeypatch.setattr(socket, "gethostname", lambda: "bad=name.example.org")
    one_line_error(invoke("collect", "--data-dir", str(data)), "hostname", "'bad=name'", "pass --host NAME")
    assert not data.exists()


def test_path_builders_refuse_escapes(tmp_path):
    """Every path built from a name goes through inside()/inside_key(): they refuse what the
    entry points refuse, so a name that slipped past one still cannot leave the root."""
    from collectors.contract import DATASETS
    from collectors.nvml.daemon import status_key

    for bad in ESCAPES:
        with pytest.raises((BadName, ValueError)):
            DATASETS["power"].partition_key(DATE, bad)
        with pytest.raises(BadName):
            inside(tmp_path, "derived", "t", f"date={DATE}", f"cluster={bad}")
        with pytest.raises(BadName):
            inside_key("power", f"date={DATE}", f"host={bad}")
        with pytest.raises(BadName):
            status_key(bad)
    assert inside(tmp_path, "power", f"date={DATE}", "host=h-0") == tmp_path.resolve() / "power" / f"date={DATE}" / "host=h-0"


@pytest.mark.parametrize("name", ["d*", "d[1]", "d?", "o'brien", "d,x"])
def test_data_dir_named_with_glob_or_quote_characters(tmp_path, name):
    """Fault: a data dir named `d*` read its siblings' files into its views; `d[1]` failed. Must
    survive: each data dir reads exactly its own files, in the pipeline's compute connection,
    the catalog and `sql`, whatever characters its own name holds."""
    mine, sibling = tmp_path / name, tmp_path / "d1"
    write_square_fleet(mine, seconds=1)  # 4 GPUs x 10 samples
    write_square_fleet(sibling, seconds=2)  # 4 GPUs x 20 samples: must never be counted
    with warehouse.compute_connection(mine, DATE) as con:
        assert con.execute("select count(*) from power").fetchone()[0] == 40
    ok = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(mine))
    assert ok.exit_code == 0 and ok.output.splitlines()[-1] == "40", ok.output
    warehouse.publish(mine)
    ok = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(mine))
    assert ok.output.splitlines() == ['"n"', "40"], ok.output
    # derived views too, including one cluster's parts inside its scope
    from pipeline.scope import Scope

    folder = Scope(date=DATE, cluster="c0").part_dir(mine, "t")
    folder.mkdir(parents=True)
    shutil.copy(next(mine.rglob("*.parquet")), folder / "part-0.parquet")
    with warehouse.compute_connection(mine, DATE, scope=Scope(date=DATE, cluster="c0")) as con:
        assert con.execute("select count(*) from t").fetchone()[0] == 10


def test_free_form_names_never_become_paths(tmp_path):
    """Endpoint, job and model names stay free-form (`Qwen/Qwen3-8B` is a real vLLM endpoint
    name) and never build a path: a simulated fleet with such names writes no folder of them."""
    inv = tiny_fleet(endpoint="Qwen/Qwen3-8B")
    inv["fleets"][0]["clusters"][0]["hosts"].append(
        {"name": "t0", "role": "training", "gpus": [{"index": 0, "tdp_w": 700, "model": "NVIDIA H100/80GB"}], "jobs": [{"name": "../job=1*", "gpus": [0]}]}
    )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(inv))
    data, before = tmp_path / "data", snapshot(tmp_path)
    ok = invoke("simulate", "--fleet", str(fleet), "--start", DATE, "--hours", "0.01", "--data-dir", str(data))
    assert ok.exit_code == 0, ok.output
    assert outside(tmp_path, data, before) == set()
    assert not [p for p in snapshot(data) if "Qwen" in p or "job=" in p or "H100" in p]
    endpoints = invoke("sql", "select distinct endpoint from requests", "--format", "csv", "--data-dir", str(data))
    assert endpoints.output.splitlines()[-1] == '"Qwen/Qwen3-8B"', endpoints.output
