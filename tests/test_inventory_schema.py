"""The whole inventory schema: every known key loads, an unknown key is one line naming its path,
line and the closest known key, the model keys are checked (tp × pp, UUIDs, one value per
endpoint), the catalog's inventory tables, and every inventory written before still loads."""

from __future__ import annotations

import json
import re
import textwrap
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest
import yaml

from collectors.inventory import INVENTORY_FILE, InventoryError, inventory_yaml, load_inventory, parse_inventory
from collectors.simulate import traffic
from collectors.simulate.fleets import BUILTIN, paper_fleet, resolve_fleet
from pipeline import warehouse
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error

DATA = Path(__file__).parent / "data" / "inventory"
DOCS = Path(__file__).parent.parent / "docs" / "data-contract.md"

FULL = textwrap.dedent("""\
    fleets:
      - name: prod
        clusters:
          - name: c0
            provisioned_w: 20000
            hosts:
              - name: infer-0
                role: inference
                power_limit_w: 600
                gpus:
                  - {index: 0, tdp_w: 700, model: H200, uuid: GPU-aaaa-0}
                  - {index: 1, tdp_w: 700, model: H200, uuid: GPU-aaaa-1, power_limit_w: 450}
                  - {index: 2, tdp_w: 700, model: H200}
                  - {index: 3, tdp_w: 700, model: H200}
                endpoints:
                  - name: llama-70b
                    gpus: [0, 1, 2, 3]
                    tz_offset_h: -8
                    model: meta-llama/Llama-3.1-70B-Instruct
                    params_b: 70
                    precision: BF16
                    tp: 4
                    engine: vllm
                    peak_rps: 3
                    prompt_median: 900
                    output_median: 200
                    traffic: code
              - name: infer-1
                role: inference
                gpus: [{index: 0, tdp_w: 700}, {index: 1, tdp_w: 700}, {index: 2, tdp_w: 700}, {index: 3, tdp_w: 700}]
                endpoints:
                  - {name: llama-70b, gpus: [0, 1, 2, 3], tz_offset_h: -8}
              - name: train-0
                role: training
                gpus: [{index: 0, tdp_w: 1000, model: B200}, {index: 1, tdp_w: 1000, model: B200}]
                jobs:
                  - name: mixtral-sft
                    gpus: [0, 1]
                    model: mixtral-8x7b
                    params_b: 46.7
                    active_params_b: 12.9
                    precision: fp8
                    tp: 2
                    pp: 1
                    dp: 4
                    engine: megatron
    kubernetes:
      labels: {pod: pod, namespace: namespace, container: container_name}
      rules:
        - match: {namespace: serving, pod: "llama-70b-*"}
          endpoint: llama-70b
        - match: {namespace: "train*"}
          job: mixtral-sft
""")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / INVENTORY_FILE
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as exc:
        load_inventory(_write(tmp_path, text))
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_every_known_key_loads(tmp_path):
    inv = load_inventory(_write(tmp_path, FULL))
    hosts = {h.name: h for _, _, h in inv.iter_hosts()}
    ep = hosts["infer-0"].endpoints[0]
    assert (ep.model, ep.params_b, ep.precision, ep.tp, ep.pp, ep.gpus_per_replica, ep.engine) == (
        "meta-llama/Llama-3.1-70B-Instruct", 70, "bf16", 4, None, 4, "vllm")
    assert (ep.peak_rps, ep.prompt_median, ep.output_median, ep.traffic) == (3, 900, 200, "code")
    job = hosts["train-0"].jobs[0]
    assert (job.active_params_b, job.precision, job.dp, job.gpus_per_replica) == (12.9, "fp8", 4, 2)
    assert [(g.uuid, g.power_limit_w) for g in hosts["infer-0"].gpus[:2]] == [("GPU-aaaa-0", None), ("GPU-aaaa-1", 450)]
    assert hosts["infer-0"].power_limit_w == 600
    # an endpoint on several hosts is one engine: keys given on one host hold for all
    assert inv.workload_spec("endpoint", "llama-70b")["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    # written back and read again: the same inventory
    assert parse_inventory(yaml.safe_load(inventory_yaml(inv))) == inv


def test_kubernetes_rules_map_labels_to_an_endpoint_or_job(tmp_path):
    k8s = load_inventory(_write(tmp_path, FULL)).kubernetes
    assert k8s is not None
    assert k8s.workload_for({"namespace": "serving", "pod": "llama-70b-7d9f8-x2x9q"}) == ("endpoint", "llama-70b")
    assert k8s.workload_for({"namespace": "serving", "pod": "qwen-8b-0"}) is None
    assert k8s.workload_for({"namespace": "training", "pod": "llama-70b-1"}) == ("job", "mixtral-sft")
    assert k8s.workload_for({"pod": "llama-70b-1"}) is None  # no namespace label: the first rule cannot match
    # defaults: dcgm-exporter's label names
    inv = load_inventory(_write(tmp_path, FULL.replace("  labels: {pod: pod, namespace: namespace, container: container_name}\n", "")))
    assert inv.kubernetes is not None and inv.kubernetes.labels.container == "container"


LINE_OF = re.compile(r"\(line (\d+)\)")

MISSPELT = {
    # key written: a unique fragment of FULL, the key it misspells there, the path in the message, the suggestion
    "parms_b": ("params_b: 70", "params_b", "fleets[0].clusters[0].hosts[0].endpoints[0].parms_b", "params_b"),
    "tp_size": ("tp: 4", "tp", "fleets[0].clusters[0].hosts[0].endpoints[0].tp_size", None),
    "uuuid": ("uuid: GPU-aaaa-1", "uuid", "fleets[0].clusters[0].hosts[0].gpus[1].uuuid", "uuid"),
    "power_limit": ("power_limit_w: 600", "power_limit_w", "fleets[0].clusters[0].hosts[0].power_limit", "power_limit_w"),
    "dp_size": ("dp: 4", "dp", "fleets[0].clusters[0].hosts[2].jobs[0].dp_size", None),
    "activ_params_b": ("active_params_b: 12.9", "active_params_b", "fleets[0].clusters[0].hosts[2].jobs[0].activ_params_b", "active_params_b"),
    "provisoned_w": ("provisioned_w: 20000", "provisioned_w", "fleets[0].clusters[0].provisoned_w", "provisioned_w"),
    "kubernets": ("kubernetes:", "kubernetes", "kubernets", "kubernetes"),
    "namspace": ("match: {namespace: serving,", "namespace", "kubernetes.rules[0].match.namspace", "namespace"),
    "endpiont": ("endpoint: llama-70b", "endpoint", "kubernetes.rules[0].endpiont", "endpoint"),
}


@pytest.mark.parametrize("key", list(MISSPELT))
def test_a_misspelt_key_names_path_line_and_closest_key(tmp_path, key):
    fragment, known, path, suggestion = MISSPELT[key]
    text = FULL.replace(fragment, fragment.replace(known, key, 1), 1)
    assert text != FULL
    message = _error(tmp_path, text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if re.search(rf"\b{key}:", ln))
    expect = f"{tmp_path / INVENTORY_FILE}: {path} (line {line}): unknown key {key!r}"
    assert message.startswith(expect), message
    if suggestion:
        assert f"; did you mean {suggestion!r}?" in message
    else:  # nothing close: the keys that are allowed there
        assert "; known keys here: name, gpus, tz_offset_h, model, params_b" in message


def test_a_misspelt_key_through_the_cli_is_one_error_line(tmp_path):
    """The acceptance case: `parms_b` in the data dir's inventory → one `error:` line, exit 2."""
    write_square_fleet(tmp_path, seconds=1)
    inv = yaml.safe_load((tmp_path / INVENTORY_FILE).read_text())
    inv["fleets"][0]["clusters"][0]["hosts"][1]["endpoints"][0]["parms_b"] = 70
    text = yaml.safe_dump(inv, sort_keys=False)
    _write(tmp_path, text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "parms_b: 70" in ln)
    expected = (f"inventory.yaml: fleets[0].clusters[0].hosts[1].endpoints[0].parms_b (line {line}): "
                "unknown key 'parms_b'; did you mean 'params_b'?")
    one_line_error(invoke("sql", "select 1", "--data-dir", str(tmp_path)), expected)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    one_line_error(invoke("run", "--date", "2026-11-30", "--data-dir", str(tmp_path)), expected)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing ran


def test_a_misspelt_required_key_is_named_rather_than_the_missing_one(tmp_path):
    message = _error(tmp_path, FULL.replace("- name: infer-1", "- nmae: infer-1"))
    assert "hosts[1].nmae (line 28): unknown key 'nmae'; did you mean 'name'? (and 1 more problem(s))" in message


MISTAKES = {
    "endpoint GPUs not a multiple of tp × pp": (
        ("tp: 4", "tp: 4\n                pp: 3"),
        "hosts[0].endpoints[0].tp (line 22): endpoint 'llama-70b' has 8 GPU(s), not a multiple of tp × pp = 12"),
    "one host of a spread endpoint short of a replica": (
        ("- {name: llama-70b, gpus: [0, 1, 2, 3], tz_offset_h: -8}", "- {name: llama-70b, gpus: [0, 1], tz_offset_h: -8}"),
        "endpoint 'llama-70b' has 6 GPU(s), not a multiple of tp × pp = 4"),
    "job with more GPUs on a host than tp × pp × dp": (
        ("tp: 2\n                pp: 1\n                dp: 4", "tp: 1\n                pp: 1\n                dp: 1"),
        "hosts[2].jobs[0].dp (line 45): job 'mixtral-sft' has 2 GPU(s) on this host, more than tp × pp × dp = 1"),
    "uuid twice": (
        ("uuid: GPU-aaaa-1", "uuid: gpu-AAAA-0"),
        "hosts[0].gpus[1].uuid (line 12): uuid 'gpu-AAAA-0' of GPU 1 of host 'infer-0' is also GPU 0 of host 'infer-0''s"),
    "one endpoint, two models": (
        ("- {name: llama-70b, gpus: [0, 1, 2, 3], tz_offset_h: -8}",
         "- {name: llama-70b, gpus: [0, 1, 2, 3], tz_offset_h: -8, model: llama-8b}"),
        "hosts[1].endpoints[0].model (line 32): endpoint 'llama-70b' has model 'llama-8b' on host 'infer-1' and "
        "'meta-llama/Llama-3.1-70B-Instruct' on host 'infer-0'"),
    "active params above params": (
        ("active_params_b: 12.9", "active_params_b: 129"),
        "jobs[0].active_params_b (line 41): active_params_b 129 is more than params_b 46.7"),
    "unknown precision": (
        ("precision: fp8", "precision: fp9"),
        "jobs[0].precision (line 42): precision must be one of fp32, tf32, bf16"),
    "unknown traffic": (
        ("traffic: code", "traffic: cod"),
        "endpoints[0].traffic (line 27): traffic must be one of conv, code (got 'cod'); did you mean 'code'?"),
    "tp zero": (("tp: 2", "tp: 0"), "jobs[0].tp (line 43): Input should be greater than or equal to 1"),
    "negative power limit": (("power_limit_w: 450", "power_limit_w: -1"), "gpus[1].power_limit_w (line 12): Input should be greater than 0"),
    "rule naming an unknown endpoint": (
        ("endpoint: llama-70b\n", "endpoint: llama-70\n"),
        "kubernetes.rules[0].endpoint (line 51): no endpoint named 'llama-70' in the inventory; did you mean 'llama-70b'?"),
    "rule naming both an endpoint and a job": (
        ("job: mixtral-sft", "job: mixtral-sft\n      endpoint: llama-70b"),
        "kubernetes.rules[1] (line 52): a rule names exactly one of endpoint or job"),
    "rule matching nothing": (
        ('match: {namespace: "train*"}', "match: {}"), "kubernetes.rules[1].match (line 52): match needs at least one of"),
    "label name Prometheus cannot have": (
        ("container: container_name}", "container: container-name}"), "kubernetes.labels.container (line 48): String should match"),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_model_keys_are_checked(tmp_path, case):
    (old, new), expected = MISTAKES[case]
    text = FULL.replace(old, new, 1)
    assert text != FULL
    message = _error(tmp_path, text)
    assert expected in message, message


def test_gpus_per_replica_needs_tp_or_pp(tmp_path):
    """Without tp and pp, GPUs per replica is unknown, not guessed, and any GPU count is accepted."""
    inv = load_inventory(_write(tmp_path, FULL.replace("                tp: 4\n", "").replace(
        "gpus: [0, 1, 2, 3], tz_offset_h: -8}", "gpus: [0, 1, 2], tz_offset_h: -8}")))
    ep = next(h for _, _, h in inv.iter_hosts() if h.name == "infer-0").endpoints[0]
    assert ep.gpus_per_replica is None
    assert {r["host"]: r["gpus_per_replica"] for r in inv.workload_rows("endpoint")} == {"infer-0": None, "infer-1": None}
    # pp alone: tp is 1
    inv = load_inventory(_write(tmp_path, FULL.replace("tp: 4", "pp: 2")))
    assert [r["gpus_per_replica"] for r in inv.workload_rows("endpoint")] == [2, 2]


def test_the_simulator_knows_the_same_traffic_profiles():
    from collectors.inventory import PRECISIONS, TRAFFIC_PROFILES

    assert TRAFFIC_PROFILES == tuple(traffic.PROFILES)
    assert len(set(PRECISIONS)) == len(PRECISIONS)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_built_in_fleets_round_trip(tmp_path, name):
    inv = resolve_fleet(name) if name != "paper" else parse_inventory(paper_fleet(4, 2))
    again = load_inventory(_write(tmp_path, inventory_yaml(inv)))
    assert again == inv
    rows = again.workload_rows("endpoint")
    gpus = {e: sum(r["gpus"] for r in rows if r["endpoint"] == e) for e in {r["endpoint"] for r in rows}}
    # whole replicas of tp × pp GPUs on every endpoint, and a model size on each
    assert rows and all(gpus[r["endpoint"]] % r["gpus_per_replica"] == 0 and r["params_b"] > 0 for r in rows)
    if name in ("demo", "tiny"):  # one TP group per endpoint
        assert all(r["tp"] == r["gpus"] for r in rows)
    if name == "tiny":  # the 8B engine calibrated on capture 4
        assert all(r["params_b"] == 8.0 for r in rows)
    if name == "demo":  # chat a 70B, code a 34B: prefills that compute long enough to show (docs/simulator.md)
        assert {(r["endpoint"].split("-")[0], r["params_b"]) for r in rows} == {("chat", 70.0), ("code", 34.0)}
    jobs = again.workload_rows("job")
    # a job's GPUs on all its hosts are exactly tp × pp × dp
    assert jobs or name == "serving"  # the serving fleet has no training job
    assert all(r["dp"] * r["tp"] * r["pp"] == sum(j["gpus"] for j in jobs if j["job"] == r["job"]) for r in jobs)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.yaml")), ids=lambda p: p.name)
def test_inventories_written_before_still_load(path):
    inv = load_inventory(path)
    assert inv.gpu_rows() and all(r["uuid"] is None and r["power_limit_w"] is None for r in inv.gpu_rows())
    assert all(r["model"] is None and r["gpus_per_replica"] is None for r in inv.workload_rows("endpoint"))


def test_the_documented_example_loads():
    section = DOCS.read_text().split("## inventory.yaml", 1)[1]
    blocks = re.findall(r"```yaml\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    assert blocks
    for block in blocks:
        inv = parse_inventory(yaml.safe_load(block), "docs", block)
        assert inv.kubernetes is not None and inv.workload_rows("endpoint") and inv.workload_rows("job")


def _catalog(data_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    warehouse.create_views(con, data_dir)
    return con


def test_catalog_inventory_tables(tmp_path):
    _write(tmp_path, FULL)
    con = _catalog(tmp_path)
    endpoints = con.execute("SELECT * FROM inventory_endpoints ORDER BY host").fetchall()
    assert [d[0] for d in con.description] == [
        "fleet", "cluster", "host", "endpoint", "gpus", "model", "params_b", "active_params_b", "precision",
        "tp", "pp", "gpus_per_replica", "engine", "tz_offset_h"]
    llama = ("meta-llama/Llama-3.1-70B-Instruct", 70.0, None, "bf16", 4, None, 4, "vllm", -8.0)
    assert endpoints == [("prod", "c0", "infer-0", "llama-70b", 4, *llama), ("prod", "c0", "infer-1", "llama-70b", 4, *llama)]
    jobs = con.execute("SELECT * FROM inventory_jobs").fetchall()
    assert [d[0] for d in con.description][-5:] == ["pp", "dp", "gpus_per_replica", "engine", "tz_offset_h"]
    assert jobs == [("prod", "c0", "train-0", "mixtral-sft", 2, "mixtral-8x7b", 46.7, 12.9, "fp8", 2, 1, 4, 2, "megatron", 0.0)]
    gpus = con.execute("SELECT host, gpu, uuid, power_limit_w FROM inventory_gpus ORDER BY host, gpu").fetchall()
    assert gpus == [("infer-0", 0, "GPU-aaaa-0", 600.0), ("infer-0", 1, "GPU-aaaa-1", 450.0), ("infer-0", 2, None, 600.0),
                    ("infer-0", 3, None, 600.0), *[("infer-1", g, None, None) for g in range(4)],
                    ("train-0", 0, None, None), ("train-0", 1, None, None)]
    # the SQL sees them: replicas per endpoint
    assert con.execute("SELECT endpoint, sum(gpus) // any_value(gpus_per_replica) FROM inventory_endpoints "
                       "GROUP BY ALL").fetchall() == [("llama-70b", 2)]
    con.close()


def test_catalog_inventory_tables_of_an_empty_data_dir(tmp_path):
    con = _catalog(tmp_path)
    for table in ("inventory_gpus", "inventory_endpoints", "inventory_jobs"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
    assert "dp" in [r[0] for r in con.execute("DESCRIBE inventory_jobs").fetchall()]
    con.close()


def test_catalog_inventory_tables_through_wattline_sql(tmp_path):
    write_square_fleet(tmp_path, seconds=1)
    inv = yaml.safe_load((tmp_path / INVENTORY_FILE).read_text())
    inv["fleets"][0]["clusters"][0]["hosts"][1]["endpoints"][0].update(tp=2, model="qwen3-8b", precision="fp8")
    _write(tmp_path, yaml.safe_dump(inv, sort_keys=False))
    result = invoke("sql", "select host, endpoint, gpus, tp, gpus_per_replica, model, precision from inventory_endpoints",
                    "--format", "json", "--data-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"host": "infer-0", "endpoint": "ep-a", "gpus": 2, "tp": 2, "gpus_per_replica": 2,
                                          "model": "qwen3-8b", "precision": "fp8"}]


# --- `wattline import prometheus --print-inventory`: a loopback server answering /api/v1/series -------

POD = {"namespace": "serving", "container": "vllm"}
SERIES = [  # dcgm-exporter with its Kubernetes mapping on: which pod holds each GPU
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-a", "gpu": "0", "UUID": "GPU-0a", "modelName": "NVIDIA H100 80GB HBM3",
     "pod": "llama-70b-5f6d-abcde", **POD},
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-a", "gpu": "1", "UUID": "GPU-1a", "modelName": "NVIDIA H100 80GB HBM3",
     "pod": "llama-70b-5f6d-abcde", **POD},
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-a", "gpu": "2", "UUID": "GPU-2a", "modelName": "NVIDIA H100 80GB HBM3",
     "pod": "qwen-8b-0", **POD},
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-a", "gpu": "2", "UUID": "GPU-2a", "modelName": "NVIDIA H100 80GB HBM3",
     "pod": "qwen-8b-1", **POD},  # the GPU changed pods during the range: left for the user
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-b", "gpu": "0", "UUID": "GPU-dup", "modelName": "NVIDIA H200"},
    {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "node-b", "gpu": "1", "UUID": "GPU-dup", "modelName": "NVIDIA H200"},
]


@pytest.fixture
def series_server():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            assert self.path == "/api/v1/series" and form["match[]"] == ["DCGM_FI_DEV_POWER_USAGE"]
            body = json.dumps({"status": "success", "data": SERIES}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_print_inventory_fills_uuid_model_and_endpoints_from_labels(series_server, tmp_path):
    result = invoke("import", "prometheus", "--url", series_server, "--start", "2026-11-30T00:00:00Z",
                    "--end", "2026-11-30T01:00:00Z", "--print-inventory", "--data-dir", str(tmp_path / "none"))
    assert result.exit_code == 0, result.output
    inv = parse_inventory(yaml.safe_load(result.output), "stub", result.output)
    hosts = {h.name: h for _, _, h in inv.iter_hosts()}
    assert [(g.index, g.tdp_w, g.model, g.uuid) for g in hosts["node-a"].gpus] == [
        (0, 700, "NVIDIA H100 80GB HBM3", "GPU-0a"), (1, 700, "NVIDIA H100 80GB HBM3", "GPU-1a"),
        (2, 700, "NVIDIA H100 80GB HBM3", "GPU-2a")]
    # one UUID on two GPUs is no board's identity: left out rather than refused on load
    assert [(g.model, g.uuid) for g in hosts["node-b"].gpus] == [("NVIDIA H200", None), ("NVIDIA H200", None)]
    assert [(e.name, e.gpus) for e in hosts["node-a"].endpoints] == [("llama-70b-5f6d-abcde", [0, 1])]
    assert not hosts["node-b"].endpoints
    assert inv.kubernetes is not None
    assert inv.kubernetes.workload_for(SERIES[0]) == ("endpoint", "llama-70b-5f6d-abcde")
    assert inv.kubernetes.workload_for(SERIES[2]) is None
    assert not (tmp_path / "none").exists()


def test_a_cluster_day_sees_the_keys_of_the_whole_endpoint():
    """An endpoint on hosts of two clusters: the cluster-day of the host without the keys still sees them."""
    def host(name: str, **keys) -> dict:
        return {"name": name, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}, {"index": 1, "tdp_w": 700}],
                "endpoints": [{"name": "ep", "gpus": [0, 1], **keys}]}

    inv = parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "a", "hosts": [host("h0", tp=2, model="m")]},
                                                                 {"name": "b", "hosts": [host("h1")]}]}]})
    rows = warehouse.cluster_inventory(inv, "b").workload_rows("endpoint")
    assert [(r["host"], r["model"], r["tp"], r["gpus_per_replica"]) for r in rows] == [("h1", "m", 2, 2)]
