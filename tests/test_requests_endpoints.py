"""Requests and endpoints agree: a bulk import of requests for an endpoint the inventory does not
declare stops with one `error:` line and writes nothing (unless --allow-unknown-endpoint); the
live paths (--follow, the OTLP receiver) quarantine such records with their reason."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from collectors.requests.ingestor import Ingestor, known_endpoints
from collectors.requests.quarantine import read_quarantine
from tests.cli_util import invoke, one_line_error
from tests.phase_fixtures import endpoint_inventory
from tests.test_requests_jsonl import T0_S, jl, rec

VLLM_RUN = sorted((Path(__file__).parent / "data" / "vllm").glob("run-*/requests.json"))[0]


def stored_rows(data: Path) -> list[dict]:
    import pyarrow.dataset as pads

    files = sorted((data / "requests").glob("date=*/*.parquet"))
    return pads.dataset(files, format="parquet").to_table().to_pylist() if files else []


def written(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob("*.parquet")) if data.exists() else []


def bench_without_model(tmp_path: Path) -> Path:
    doc = json.loads(VLLM_RUN.read_text())
    for key in ("model_id", "model", "tokenizer_id"):
        doc.pop(key, None)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


def test_bench_file_naming_no_model_is_refused_not_stored_under_the_format(tmp_path):
    data = tmp_path / "d"
    endpoint_inventory(data, endpoint="chat")
    path = bench_without_model(tmp_path)
    one_line_error(invoke("ingest", "requests", "--format", "vllm-bench", str(path), "--data-dir", str(data)),
                   "names no model", "--endpoint")
    assert written(data) == []
    ok = invoke("ingest", "requests", "--format", "vllm-bench", "--endpoint", "chat", str(path), "--data-dir", str(data))
    assert ok.exit_code == 0, ok.output
    assert {r["endpoint"] for r in stored_rows(data)} == {"chat"}


def test_unknown_endpoint_in_bulk_is_one_error_line_naming_the_known_ones(tmp_path):
    data = tmp_path / "d"
    endpoint_inventory(data, endpoint="chat")
    log = tmp_path / "a.jsonl"
    log.write_bytes(jl(rec(0), rec(1), rec(2, endpoint="cheat")))
    one_line_error(invoke("ingest", "requests", str(log), "--data-dir", str(data)),
                   "endpoint(s) not in inventory.yaml: cheat", "known: chat", "--allow-unknown-endpoint",
                   "nothing written")
    assert written(data) == []
    # a fixed --endpoint is checked before anything is read
    one_line_error(invoke("ingest", "requests", "--format", "azure", "--endpoint", "conv", str(log), "--data-dir",
                          str(data)), "not in inventory.yaml: conv", "known: chat")
    # Azure traces carry no endpoint: the file's name is not one
    one_line_error(invoke("ingest", "requests", "--format", "azure", str(log), "--data-dir", str(data)),
                   "--endpoint")
    assert written(data) == []
    allowed = invoke("ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data))
    assert allowed.exit_code == 0 and "ingested 3 request(s)" in allowed.output
    assert sorted(r["endpoint"] for r in stored_rows(data)) == ["chat", "chat", "cheat"]


def test_without_an_inventory_bulk_is_refused_saying_what_to_do(tmp_path):
    data = tmp_path / "d"
    log = tmp_path / "a.jsonl"
    log.write_bytes(jl(rec(0)))
    one_line_error(invoke("ingest", "requests", str(log), "--data-dir", str(data)),
                   "no inventory.yaml", "write the inventory", "--allow-unknown-endpoint")
    assert written(data) == []
    assert known_endpoints(data) is None
    endpoint_inventory(data, endpoint="chat")
    assert known_endpoints(data) == frozenset({"chat"})
    assert invoke("ingest", "requests", str(log), "--data-dir", str(data)).exit_code == 0
    assert len(stored_rows(data)) == 1


def test_refusal_stops_before_the_batch_naming_the_unknown_endpoint(tmp_path):
    """Several files: those before the first unknown endpoint stay (each batch is checked before it is
    written); the error says what was stored, and a re-run adds only the rest."""
    data = tmp_path / "d"
    endpoint_inventory(data, endpoint="chat")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_bytes(jl(rec(0), rec(1)))
    (tmp_path / "logs" / "b.jsonl").write_bytes(jl(rec(2, endpoint="cheat")))
    r = invoke("ingest", "requests", str(tmp_path / "logs"), "--data-dir", str(data))
    one_line_error(r, "not in inventory.yaml: cheat", "ingested 2 request(s)", "re-running adds only the rest")
    assert len(stored_rows(data)) == 2


def test_follow_quarantines_unknown_endpoints_and_keeps_going(tmp_path):
    data, logs = tmp_path / "d", tmp_path / "logs"
    logs.mkdir()
    endpoint_inventory(data, endpoint="chat")
    (logs / "app.jsonl").write_bytes(jl(rec(0), rec(1, endpoint="cheat"), rec(2)))
    exe = Path(sys.executable).with_name("wattline")
    proc = subprocess.Popen([str(exe), "ingest", "requests", "--follow", str(logs), "--flush-interval-s", "0.2",
                             "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(stored_rows(data)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        with open(logs / "app.jsonl", "ab") as fh:
            fh.write(jl(rec(3)))
        while len(stored_rows(data)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert sorted(r["request_id"] for r in stored_rows(data)) == ["r0", "r2", "r3"]
    (q,) = read_quarantine(data).to_pylist()
    assert q["reason"] == "endpoint not in inventory.yaml: cheat" and q["line_no"] == 2
    assert json.loads(q["raw"])["request_id"] == "r1"
    assert "quarantined 1" in out and "endpoint not in inventory.yaml: cheat 1" in out


def test_live_paths_refuse_to_start_on_a_fixed_unknown_endpoint_or_no_inventory(tmp_path):
    data = tmp_path / "d"
    (tmp_path / "logs").mkdir()
    one_line_error(invoke("ingest", "otlp", "--endpoint", "vllm-a", "--data-dir", str(data)), "no inventory.yaml")
    endpoint_inventory(data, endpoint="chat")
    one_line_error(invoke("ingest", "otlp", "--endpoint", "vllm-a", "--data-dir", str(data)),
                   "not in inventory.yaml: vllm-a", "known: chat")
    one_line_error(invoke("ingest", "requests", "--follow", "--endpoint", "vllm-a", str(tmp_path / "logs"),
                          "--data-dir", str(data)), "not in inventory.yaml: vllm-a")


def test_quarantined_record_goes_under_its_arrival_day(tmp_path):
    data = tmp_path / "d"
    endpoint_inventory(data, endpoint="chat")
    ingestor = Ingestor(data, "jsonl", progress=False, unknown_endpoint="quarantine")
    log = tmp_path / "a.jsonl"
    log.write_bytes(jl(rec(0, endpoint="x\x1b[31m")))
    ingestor.ingest([log])
    assert ingestor.summary.quarantined == 1 and stored_rows(data) == []
    day = time.strftime("%Y-%m-%d", time.gmtime(T0_S))
    assert list((data / "quarantine" / "requests").glob(f"date={day}/*.parquet"))
    (q,) = read_quarantine(data).to_pylist()
    assert "\x1b" not in q["reason"]  # the name is shown escaped
