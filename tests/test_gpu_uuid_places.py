"""Real fleets name a GPU by its UUID: dcgm-exporter's ``Hostname`` is the Kubernetes node name
(``node-17``) and its ``gpu`` index need not be the inventory's, while the inventory names the board
by UUID under host ``infer-0``. Every importer that sees a UUID stores the GPU's power where the
inventory puts that UUID, as the assignments from the same import are, so the two meet."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

from collectors.contract import REQUESTS
from collectors.inventory import GpuPlaceConflict, GpuPlaces, dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY
from tests.cli_util import invoke, one_line_error
from tests.days import slow_setup
from tests.noon_split import (
    ASSETS,
    NOON_NS,
    RULES,
    START_NS,
    STEP_S,
    STEPS,
    UUID,
    PodExporter,
    _endpoint_energy,
    _inventory,
    _requests,
    scraped,
)
from tests.prometheus_harness import PROMETHEUS

NODE = "node-17"


@pytest.fixture(scope="module")
@slow_setup  # a real Prometheus that scrapes its series in real time (~12 s)
def node_prometheus(tmp_path_factory):
    """A real Prometheus that scraped dcgm-exporter on Kubernetes node node-17, the board at index 3."""
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} is missing: apt-get install -y prometheus")
    yield from scraped(tmp_path_factory.mktemp("prom"), PodExporter(host=NODE, gpu=3))


def _power_rows(d):
    return pads.dataset(d / "power", format="parquet", partitioning="hive").to_table(
        columns=["host", "gpu", "gpu_uuid"]).to_pylist()


@pytest.mark.slow  # runs the daily job on a day of its own
def test_node_name_and_index_resolve_to_the_inventorys_gpu_for_power_and_assignments(node_prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d, kubernetes=RULES)  # infer-0's GPU 0 is UUID; GPU-1 (the notebook's board) it does not know
    _requests(d)
    out = invoke("import", "prometheus", "--url", node_prometheus, "--start", str(START_NS // 10**9),
                 "--end", str(START_NS // 10**9 + STEPS * STEP_S - 1), "--data-dir", str(d))
    assert out.exit_code == 0, out.output
    places = {(r["host"], r["gpu"], r["gpu_uuid"]) for r in _power_rows(d)}
    assert places == {("infer-0", 0, UUID), (NODE, 1, "GPU-1")}
    assert (f"GPUs: 1 matched by UUID to the inventory's host and index ({NODE}/3 → infer-0/0), "
            "1 kept the source's Hostname/gpu labels") in out.output
    # the assignments of the same import are on the same GPU
    held = [f for f in (d / "assignments").glob("*.parquet")]
    con = duckdb.connect()
    assert con.execute(f"SELECT DISTINCT host, gpu FROM read_parquet({[str(f) for f in held]})").fetchall() == [("infer-0", 0)]
    result = run_day(d, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert result.success, result.error
    got, per_token, _ = _endpoint_energy(d)
    con.register("ec", read_day(d, "energy_curve", DAY.isoformat()))
    (gpu_j,), = con.execute("SELECT max(end_energy_j) FROM ec WHERE host = 'infer-0' AND gpu = 0").fetchall()
    assert gpu_j is not None and gpu_j > 100_000  # 20 min at 150-470 W
    assert got["ep-a"] > 0 and got["ep-b"] > 0
    assert got["ep-a"] + got["ep-b"] == pytest.approx(gpu_j, rel=1e-6)
    assert per_token["ep-a"] + per_token["ep-b"] == pytest.approx(gpu_j, rel=1e-6)
    (before,), = con.execute(f"SELECT max(end_energy_j) FROM ec WHERE host = 'infer-0' AND gpu = 0 AND t_ns < {NOON_NS}").fetchall()
    assert got["ep-a"] == pytest.approx(before, rel=2e-2)  # the split falls at noon, within one 10 s scrape


def _inv(*gpus):
    return parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [
        {"name": "infer-0", "role": "inference", "gpus": list(gpus)}]}]}]})


def test_one_board_under_two_labels_goes_to_its_place_and_two_boards_in_one_place_are_an_error():
    places = GpuPlaces(_inv({"index": 0, "tdp_w": 700, "uuid": UUID}))
    assert places.place(NODE, 3, UUID.upper()) == ("infer-0", 0)  # UUIDs compare without case
    assert places.place("node-17-renamed", 3, UUID) == ("infer-0", 0)
    assert places.place(NODE, 5, "GPU-unknown") == (NODE, 5)
    assert places.place("infer-0", 1, None) == ("infer-0", 1)
    assert places.summary().startswith("GPUs: 1 matched by UUID")
    assert "2 kept the source's host and index labels" in places.summary()
    with pytest.raises(GpuPlaceConflict, match="GPU 0 of host 'infer-0' .uuid 'GPU-other'. and GPU 3 of host 'node-17'"):
        places.place("infer-0", 0, "GPU-other")
    swapped = GpuPlaces(None)  # no inventory: a board replaced in one slot keeps the slot
    assert swapped.place("h", 0, "GPU-a") == swapped.place("h", 0, "GPU-b") == ("h", 0)
    assert swapped.summary().endswith("(no inventory.yaml)")


def test_a_uuid_the_inventory_gives_two_gpus_is_an_inventory_error():
    with pytest.raises(Exception, match="is also GPU 0 of host 'infer-0'"):
        _inv({"index": 0, "tdp_w": 700, "uuid": UUID}, {"index": 1, "tdp_w": 700, "uuid": UUID.lower()})


def test_prometheus_import_refuses_two_boards_in_one_place(node_prometheus, tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    # the inventory puts UUID at node-17's GPU 1, where the source's other board (GPU-1) says it is
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{"name": NODE, "role": "inference", "gpus": [
        {"index": 1, "tdp_w": 700.0, "uuid": UUID}, {"index": 3, "tdp_w": 700.0}]}]}]}]}
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    out = invoke("import", "prometheus", "--url", node_prometheus, "--start", str(START_NS // 10**9),
                 "--end", str(START_NS // 10**9 + STEPS * STEP_S - 1), "--data-dir", str(d))
    one_line_error(out, "nothing written", "would both be stored as GPU 1 of host 'node-17'")
    assert not (d / "power").exists()


H100 = Path(__file__).resolve().parent / "data" / "nvidia-smi" / "h100-qwen3-8b.csv"
H100_UUID = "GPU-171e341c-4c74-fca8-094f-1cbff4dbdd21"  # its uuid column; index 0


def _some_requests(d, endpoint, first_ns):
    """Three requests 10 s apart: the endpoint has a day of requests to read its power against."""
    rows = [(f"r{k}", first_ns + k * 10**10) for k in range(3)]
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    given = {"request_id": [r[0] for r in rows], "endpoint": [endpoint] * 3, "arrival_ts": ts([r[1] for r in rows]),
             "prefill_start_ts": ts([r[1] for r in rows]), "first_token_ts": ts([r[1] + 10**9 for r in rows]),
             "end_ts": ts([r[1] + 5 * 10**9 for r in rows]), "prompt_tokens": pa.array([500] * 3, pa.int32()),
             "output_tokens": pa.array([100] * 3, pa.int32()), "status": ["ok"] * 3}
    write_dataset(pa.table({f.name: given.get(f.name, pa.nulls(3, f.type)) for f in REQUESTS}, schema=REQUESTS), d, "requests")


@pytest.mark.slow  # runs the daily job on a day of its own
def test_nvidia_smi_uuid_column_resolves_to_the_inventorys_gpu(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{"name": "infer-0", "role": "inference",
           "gpus": [{"index": 0, "tdp_w": 700.0}, {"index": 2, "tdp_w": 700.0, "model": "H100", "uuid": H100_UUID.upper()}],
           "endpoints": [{"name": "ep-h100", "gpus": [2]}]}]}]}]}
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    out = invoke("import", "nvidia-smi", str(H100), "--host", NODE, "--tz", "-07:00", "--data-dir", str(d))
    assert out.exit_code == 0, out.output
    rows = _power_rows(d)
    assert len(rows) == 265 and {(r["host"], r["gpu"], r["gpu_uuid"]) for r in rows} == {("infer-0", 2, H100_UUID)}
    assert (f"GPUs: 1 matched by UUID to the inventory's host and index ({NODE}/0 → infer-0/2), "
            "0 kept the source's --host and index") in out.output
    day = min(p.name.removeprefix("date=") for p in (d / "power").glob("date=*"))
    t0 = pads.dataset(d / "power", format="parquet", partitioning="hive").to_table(columns=["ts"]).column("ts")
    _some_requests(d, "ep-h100", pc.min(t0.cast(pa.timestamp("ns", tz="UTC"))).cast(pa.int64()).as_py() + 5 * 10**9)
    result = run_day(d, day, selection=ASSETS.split(","), fleet_day=False)
    assert result.success, result.error
    con = duckdb.connect()
    con.register("ec", read_day(d, "energy_curve", day))
    con.register("pi", read_day(d, "phase_intervals", day))
    (gpu_j,), = con.execute("SELECT max(end_energy_j) FROM ec WHERE host = 'infer-0' AND gpu = 2").fetchall()
    (ep_j,), = con.execute("SELECT sum(energy_j) FROM pi WHERE endpoint = 'ep-h100'").fetchall()
    assert gpu_j is not None and gpu_j > 10_000
    assert ep_j == pytest.approx(gpu_j, rel=1e-6)


def test_nvidia_smi_line_of_a_second_board_in_one_place_is_quarantined_alone(tmp_path):
    from collectors.nvidia_smi import import_files

    log = tmp_path / "smi.csv"  # GPU 0 is a board the inventory does not know; GPU 1 is the one it puts at infer-0/0
    lines = ["timestamp, index, uuid, power.draw [W]"]
    for k in range(4):
        lines += [f"2026/07/18 17:57:4{k}.000, 0, GPU-unknown, 100.0", f"2026/07/18 17:57:4{k}.000, 1, {UUID}, 200.0"]
    log.write_text("\n".join(lines) + "\n")
    res = import_files([log], tmp_path / "data", "infer-0", tz="UTC", inventory=_inv({"index": 0, "tdp_w": 700, "uuid": UUID}))
    assert res.rows == 4 and res.quarantined == 4 and res.reasons == {"GPU place conflict": 4}
    assert {(r["host"], r["gpu"], r["gpu_uuid"]) for r in _power_rows(tmp_path / "data")} == {("infer-0", 0, "GPU-unknown")}
    assert "1 kept the source's --host and index" in res.summary("infer-0")


def test_one_board_under_two_node_names_is_one_gpu_in_the_power_rows():
    import numpy as np

    from collectors.prometheus import ImportResult, Series, place_gpus, to_table

    def series(host, t_ms, w):
        s = Series(host, 3, uuid=UUID, t_ms=[np.array(t_ms, np.int64)], power_avg_w=[np.array(w, np.float64)],
                   power_sid=[np.zeros(len(t_ms), np.int64)], hold_t_ms=[np.array(t_ms, np.int64)],
                   hold_sid=[np.zeros(len(t_ms), np.int64)])
        s.finish()
        return s

    day_ms = START_NS // 10**6
    res = ImportResult(gpus={(NODE, 3): series(NODE, [day_ms, day_ms + 1000], [100.0, 110.0]),
                             ("node-17b", 3): series("node-17b", [day_ms + 2000, day_ms + 3000], [120.0, 130.0])})
    place_gpus(res, _inv({"index": 0, "tdp_w": 700, "uuid": UUID}))
    assert list(res.gpus) == [("infer-0", 0)]
    table = to_table(res)
    assert table.column("power_avg_w").to_pylist() == [100.0, 110.0, 120.0, 130.0]
    assert set(table.column("host").to_pylist()) == {"infer-0"} and set(table.column("gpu").to_pylist()) == {0}
    place_gpus(res, _inv({"index": 0, "tdp_w": 700, "uuid": UUID}))  # placing again: the same
    assert list(res.gpus) == [("infer-0", 0)] and to_table(res).num_rows == 4
    assert "GPUs: 1 matched by UUID" in res.summary()
