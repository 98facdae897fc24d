"""``replica`` (the engine instance that served a request) through the importers whose source names
it (OTLP ``service.instance.id``, a JSONL ``replica`` key), null where the source does not say
(vLLM benchmark results), and request files written before the column existed read as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collectors.contract import ADDED_COLUMNS, REQUESTS, inspect_file
from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from pipeline.warehouse import compute_connection
from tests.otlp_sender import emit, fake_request, otlp_json, tracer_for
from tests.phase_fixtures import endpoint_inventory
from tests.test_otlp_receiver import receiver  # noqa: F401  (the fixture)
from tests.test_otlp_receiver import stored as received
from tests.test_requests_jsonl import ingest, jl, rec, stored

VLLM_RUN = Path(__file__).parent / "data" / "vllm" / "run-1784415083" / "requests.json"
INSTANCE = "service.instance.id"


def by_id(data: Path) -> dict[str, str | None]:
    df = stored(data)
    return dict(zip(df["request_id"].to_list(), df["replica"].to_list(), strict=True))


@pytest.mark.parametrize("lines", [2, 1500], ids=["per-line", "vectorised"])
def test_jsonl_keeps_the_replica_and_leaves_it_null_when_absent(tmp_path, lines):
    """Both paths of the JSONL parser; an integer id becomes its text (exact), "" names nothing."""
    def replica(i):
        return [None, "vllm-0", "vllm-1", ""][i % 4]

    recs = [rec(i, replica=replica(i)) for i in range(lines)]
    recs.append(rec(lines, replica=3))  # an integer: the per-line path, kept as "3"
    bad = {lines + 1: [1], lines + 2: 1.5}
    recs += [rec(i, replica=v) for i, v in bad.items()]
    summary, data = ingest(tmp_path, jl(*recs))
    assert summary.ingested == lines + 1
    got = by_id(data)
    for i in range(lines):
        assert got[f"r{i}"] == (replica(i) or None)
    assert got[f"r{lines}"] == "3"
    reasons = sorted(q["reason"] for q in read_quarantine(data).to_pylist())
    assert reasons == ["replica must be a string (or an integer), got float",
                       "replica must be a string (or an integer), got list"]


def test_otlp_span_from_the_sdk_carries_service_instance_id(tmp_path):
    """Two vLLM instances of one endpoint naming their ``service.instance.id``, one leaving it to the
    SDK (``Resource.create`` sets a random id per process) and a resource without it (null)."""
    memory = InMemorySpanExporter()
    resources = [Resource.create({"service.name": "vllm-a", INSTANCE: "vllm-a-0"}),
                 Resource.create({"service.name": "vllm-a", INSTANCE: "vllm-a-1"}),
                 Resource.create({"service.name": "vllm-a"}),
                 Resource({"service.name": "vllm-a"})]
    spans = []
    for i, resource in enumerate(resources):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(SimpleSpanProcessor(memory))
        emit(provider.get_tracer("vllm.llm_engine"), fake_request(i))
        spans.append(memory.get_finished_spans()[-1])
    log = tmp_path / "traces.json"
    log.write_bytes(b"\n".join(otlp_json([s]) for s in spans) + b"\n")
    data = tmp_path / "data"
    summary = Ingestor(data, "otlp", endpoint="vllm-a", progress=False).ingest([log])
    assert summary.ingested == 4
    assert by_id(data) == {fake_request(0).request_id: "vllm-a-0", fake_request(1).request_id: "vllm-a-1",
                           fake_request(2).request_id: resources[2].attributes[INSTANCE],
                           fake_request(3).request_id: None}


def test_otlp_receiver_keeps_the_instance_of_each_export(receiver):  # noqa: F811
    """Protobuf and JSON exports of two instances posted to the receiver (the SDK's exporters)."""
    url, data, rx = receiver
    for protocol, instance, ids in (("protobuf", "pod-0", range(0, 3)), ("json", "pod-1", range(3, 6))):
        tracer, provider, _ = tracer_for(url, protocol, **{INSTANCE: instance})
        for i in ids:
            emit(tracer, fake_request(i))
        provider.shutdown()
    rx.flush()
    rows = received(data)
    assert {k: r["replica"] for k, r in rows.items()} == {
        fake_request(i).request_id: "pod-0" if i < 3 else "pod-1" for i in range(6)}


def test_vllm_bench_results_leave_the_replica_null(tmp_path):
    """A benchmark client does not see which replica served a request."""
    Ingestor(tmp_path, "vllm-bench", endpoint="q", progress=False).ingest([VLLM_RUN])
    df = stored(tmp_path)
    assert df.height == len(json.loads(VLLM_RUN.read_text())["input_lens"])
    assert df["replica"].null_count() == df.height


def _old_schema_file(data: Path, day: str = "2026-12-02") -> Path:
    """A requests file as written before ``max_tokens`` and ``replica`` existed."""
    old = pa.schema([f for f in REQUESTS if f.name not in ADDED_COLUMNS["requests"]])
    ts = pa.array([1_796_216_700_000_000_000], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    table = pa.table({"request_id": ["old-0"], "endpoint": ["chat"], "arrival_ts": ts, "prefill_start_ts": ts,
                      "first_token_ts": ts, "end_ts": ts, "prompt_tokens": pa.array([5], pa.int32()),
                      "output_tokens": pa.array([3], pa.int32()), "status": ["ok"]}, schema=old)
    path = data / "requests" / f"date={day}" / "old.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return path


def test_old_request_files_read_with_replica_null_untouched_and_unlogged(tmp_path):
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="chat", gpus=1)
    old = _old_schema_file(data)
    before = old.read_bytes()
    assert inspect_file(old, REQUESTS).exact
    summary, _ = ingest(tmp_path, jl(rec(0, replica="r-0"), rec(1)))
    assert summary.ingested == 2
    assert old.read_bytes() == before and not (data / "quarantine" / "file_log").exists()
    with compute_connection(data, "2026-12-02") as con:
        rows = dict(con.execute("SELECT request_id, replica FROM requests ORDER BY request_id").fetchall())
    assert rows == {"old-0": None, "r0": "r-0", "r1": None}


def test_a_row_stored_before_replica_is_a_duplicate_when_read_again(tmp_path):
    """The same log line stored before the column existed and read again now with a replica: one request."""
    data = tmp_path / "data"
    old = _old_schema_file(data)
    line = {"request_id": "old-0", "endpoint": "chat", "arrival_ts": "2026-12-02T13:05:00Z",
            "prefill_start_ts": "2026-12-02T13:05:00Z", "first_token_ts": "2026-12-02T13:05:00Z",
            "end_ts": "2026-12-02T13:05:00Z", "prompt_tokens": 5, "output_tokens": 3, "replica": "r-0"}
    summary, _ = ingest(tmp_path, jl(line))
    assert (summary.ingested, summary.duplicates, summary.quarantined) == (0, 1, 0)
    assert sorted((data / "requests").rglob("*.parquet")) == [old]


def test_otlp_instance_id_of_another_type_quarantines_only_its_spans(tmp_path):
    """An integer ``service.instance.id`` is kept as its text; a double is drift: that resource's span
    is quarantined with the reason, the spans of the other resources of the same line are stored."""
    memory = InMemorySpanExporter()
    for i in range(3):
        provider = TracerProvider(resource=Resource({"service.name": "vllm-a", INSTANCE: f"pod-{i}"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        emit(provider.get_tracer("vllm.llm_engine"), fake_request(i))
    doc = json.loads(otlp_json(memory.get_finished_spans()))
    assert len(doc["resourceSpans"]) == 3
    for rs, value in zip(doc["resourceSpans"], ({"intValue": "7"}, {"doubleValue": 1.5}, None), strict=True):
        for attr in rs["resource"]["attributes"]:
            if attr["key"] == INSTANCE and value is not None:
                attr["value"] = value
    log = tmp_path / "traces.json"
    log.write_text(json.dumps(doc) + "\n")
    data = tmp_path / "data"
    summary = Ingestor(data, "otlp", endpoint="vllm-a", progress=False).ingest([log])
    assert (summary.ingested, summary.quarantined) == (2, 1)
    assert by_id(data) == {fake_request(0).request_id: "7", fake_request(2).request_id: "pod-2"}
    (reject,) = read_quarantine(data).to_pylist()
    assert reject["reason"] == f"resource attribute {INSTANCE} must be a string (or an integer), got float"
