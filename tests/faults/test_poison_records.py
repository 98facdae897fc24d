"""Hostile input II: one poison record is one quarantined record, in every request importer.

A record with a value out of every range (a latency of 1e12 s or 1e300 s, NaN, a span start past
2⁶³ or past 2⁶⁴, a token count of 5,000 digits, an id that is not hex) among good ones, through
the real OTLP receiver (raw HTTP posts and the OpenTelemetry SDK's exporter, protobuf and JSON),
`ingest requests --format otlp / vllm-bench / jsonl` and `--follow`. Each good record must be
stored once, the bad one quarantined with its reason, the exit 0, the receiver's answer an OTLP
`partial_success` naming one rejected span; and nothing printed from a record can forge a line.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import requests as http
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from collectors.requests.ingestor import Ingestor
from collectors.requests.otlp_receiver import Receiver, serve
from collectors.requests.tail import Follower
from tests.cli_util import invoke
from tests.faults.poison import (
    LONG_DIGITS,
    Raw,
    bench_doc,
    export_doc,
    export_protobuf,
    jsonl_record,
    quarantined,
    span_dict,
    stored_ids,
    to_json,
)
from tests.otlp_sender import DAY_START_NS, emit, fake_request
from tests.phase_fixtures import endpoint_inventory

E2E = "gen_ai.latency.e2e"


@pytest.fixture
def receiver(tmp_path):
    """The real receiver on a free loopback port (endpoint from service.name), flushed by hand."""
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    warnings: list[str] = []
    ingestor = Ingestor(data, "otlp", endpoint_from="service.name", progress=False)
    rx = Receiver(ingestor, endpoint_from="service.name", flush_interval_s=60, warn=warnings.append)
    stop, ready, address = threading.Event(), threading.Event(), {}
    thread = threading.Thread(target=serve, args=(rx, "127.0.0.1", 0, stop),
                              kwargs={"ready": lambda a: (address.update(a=a), ready.set())}, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{address['a'][1]}/v1/traces", data, rx, warnings
    stop.set()
    thread.join(10)


def _post(url: str, body: bytes, encoding: str):
    ctype = "application/json" if encoding == "json" else "application/x-protobuf"
    resp = http.post(url, data=body, headers={"Content-Type": ctype}, timeout=10)
    assert resp.status_code == 200, (resp.status_code, resp.content[:300])
    if encoding == "json":
        part = resp.json().get("partialSuccess", {})
        return int(part.get("rejectedSpans", 0)), part.get("errorMessage", "")
    answer = ExportTraceServiceResponse.FromString(resp.content)
    return answer.partial_success.rejected_spans, answer.partial_success.error_message


POISON_SPANS = {
    # name: (span of request 50, fragment of its reason, encodings it can be sent in); NaN and a
    # count past int32 were rejected alone before too: they are the controls
    "e2e-1e12": ({E2E: 1e12}, f"{E2E} over 604800 s", ("protobuf", "json")),
    "e2e-1e300": ({E2E: 1e300}, f"{E2E} over 604800 s", ("protobuf", "json")),
    "ttft-NaN": ({"gen_ai.latency.time_to_first_token": Raw('"NaN"')}, "number of seconds, got nan", ("protobuf", "json")),
    "start-past-2^63": ({"start_ns": 2**63 + 12345}, "arrival_ts out of range", ("protobuf", "json")),
    "start-past-2^64": ({"start_ns": 10**25}, "invalid OTLP span", ("json",)),
    "tokens-5000-digits": ({"gen_ai.usage.prompt_tokens": Raw(LONG_DIGITS)}, "invalid OTLP span", ("json",)),
    "tokens-past-int32": ({"gen_ai.usage.prompt_tokens": str(2**40)}, "must be an integer in 0..2^31-1", ("protobuf", "json")),
    "trace-id-not-hex": ({"traceId": "zz" * 16}, "is not hex", ("json",)),
}
CASES = [(name, enc) for name, (_, _, encs) in POISON_SPANS.items() for enc in encs]


def _poison_span(name: str) -> dict:
    attrs, _, _ = POISON_SPANS[name]
    attrs = dict(attrs)
    start = attrs.pop("start_ns", None)
    trace_id = attrs.pop("traceId", None)
    span = span_dict(50, start_ns=start, **attrs)
    if trace_id:
        span["traceId"] = trace_id
    return span


@pytest.mark.parametrize(("poison", "encoding"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_receiver_keeps_100_good_spans_and_rejects_the_poison_one(receiver, poison, encoding):
    """Fault: one export of 100 good llm_request spans and one poison span. Before: the mapping
    raised, the connection closed with no answer and all 101 spans were lost on every retry (or,
    in JSON, the whole body got 400). Must: 200 with partial_success rejected_spans = 1 and its
    reason; the 100 stored once; the poison span quarantined with its reason."""
    url, data, rx, _ = receiver
    spans = [span_dict(i) for i in range(100)]
    spans.insert(50, _poison_span(poison))
    body = to_json(export_doc(spans)).encode() if encoding == "json" else export_protobuf(spans)
    rejected, message = _post(url, body, encoding)
    reason = POISON_SPANS[poison][1]
    assert rejected == 1 and reason in message, message
    assert _post(url, body, encoding)[0] == 1  # the exporter's retry: the same answer, nothing twice
    rx.flush()
    assert stored_ids(data) == sorted(f"cmpl-{i:05d}" for i in range(100))
    q = quarantined(data)
    assert len(q) == 1 and reason in q[0]["reason"], q
    assert b"cmpl-00050" in q[0]["raw"]


def test_sdk_exporter_gets_success_and_only_the_poison_span_is_lost(receiver):
    """The official SDK exporter (protobuf), 20 spans in one export, one with e2e = 1e300 and one
    starting past 2⁶³: the export succeeds (before: the connection closed, the SDK failed and
    retried into the same failure), 18 stored, 2 quarantined."""
    url, data, rx, _ = receiver
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm-a"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("vllm.llm_engine")
    for i in range(20):
        if i == 7:  # e2e of 1e300 s: emit()'s span end would overflow, so this one is built by hand
            span = tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=fake_request(i).arrival_ns)
            span.set_attributes({"gen_ai.request.id": "cmpl-00007", "gen_ai.usage.prompt_tokens": 5,
                                 "gen_ai.usage.completion_tokens": 5, "gen_ai.latency.time_to_first_token": 0.1,
                                 E2E: 1e300})
            span.end(end_time=fake_request(i).arrival_ns + 10**9)
        elif i == 13:
            span = tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=2**63 + 99)
            span.set_attributes({"gen_ai.request.id": "cmpl-00013", "gen_ai.usage.prompt_tokens": 5,
                                 "gen_ai.usage.completion_tokens": 5, "gen_ai.latency.time_to_first_token": 0.1})
            span.end(end_time=2**63 + 10**9)
        else:
            emit(tracer, fake_request(i))
    result = OTLPSpanExporter(endpoint=url, timeout=10).export(memory.get_finished_spans())
    assert result == SpanExportResult.SUCCESS
    rx.flush()
    assert stored_ids(data) == sorted(f"cmpl-{i:05d}" for i in range(20) if i not in (7, 13))
    reasons = sorted(r["reason"] for r in quarantined(data))
    assert reasons[0].startswith("arrival_ts out of range: day 2262-04-11 is outside the days"), reasons
    assert reasons[1] == f"{E2E} over 604800 s (7 days), got 1e+300", reasons


def _otlp_file(path: Path, lines: list[list[dict]]) -> Path:
    path.write_text("".join(to_json(export_doc(spans)) + "\n" for spans in lines))
    return path


def test_otlp_file_poison_span_is_one_quarantined_record(tmp_path):
    """Fault: an OTLP JSON-lines file (`--format otlp`) whose first line holds 50 good spans and
    one with e2e = 1e12, the second 50 good spans and one starting past 2⁶⁴. Before: traceback,
    exit 1, 0 rows (the second: the whole line quarantined). Must: exit 0, 100 stored, 2 quarantined."""
    spans = [span_dict(i) for i in range(100)]
    log = _otlp_file(tmp_path / "traces.jsonl", [spans[:50] + [span_dict(500, **{E2E: 1e12})],
                                                 spans[50:] + [span_dict(501, start_ns=10**25)]])
    data = tmp_path / "d"
    r = invoke("ingest", "requests", "--allow-unknown-endpoint", "--format", "otlp", "--endpoint", "vllm-a", str(log), "--data-dir", str(data))
    assert r.exit_code == 0, r.output
    assert "ingested 100 request(s), quarantined 2" in r.output
    assert stored_ids(data) == sorted(f"cmpl-{i:05d}" for i in range(100))
    q = sorted(quarantined(data), key=lambda x: x["line_no"])
    assert [x["line_no"] for x in q] == [1, 2]
    assert q[0]["reason"] == f"{E2E} over 604800 s (7 days), got 1000000000000.0"
    assert q[1]["reason"].startswith("invalid OTLP span: Failed to parse startTimeUnixNano"), q[1]["reason"]
    assert b"cmpl-00501" in q[1]["raw"] and b"10000000000000000000000000" in q[1]["raw"]


def test_vllm_bench_one_bad_request_is_one_quarantined_record(tmp_path):
    """Fault: a vLLM bench results file of 20 requests where request 4 has ttfts = 1e300, 8 an
    itl of 1e12, 10 output_lens past int32, 13 input_lens of 5,000 digits, 16 a start time of
    1e300. Before: traceback, exit 1, 0 rows. Must: exit 0, the 15 others stored, those 5
    quarantined under their position with their reason (and their own digits kept)."""
    poison = {3: {"ttfts": 1e300}, 7: {"itls": [0.01, 1e12]}, 9: {"output_lens": 3_000_000_000},
              12: {"input_lens": Raw(LONG_DIGITS)}, 15: {"request_timestamps": 1e300}}
    doc = bench_doc(20, poison)
    path = tmp_path / "bench.json"
    path.write_text(to_json(doc))
    data = tmp_path / "d"
    r = invoke("ingest", "requests", "--allow-unknown-endpoint", "--format", "vllm-bench", str(path), "--data-dir", str(data))
    assert r.exit_code == 0, r.output
    assert "ingested 15 request(s), quarantined 5" in r.output
    assert len(stored_ids(data)) == 15
    q = {x["line_no"]: x for x in quarantined(data)}
    assert {n: q[n]["reason"].split(",")[0] for n in q} == {
        4: "ttfts over 604800 s (7 days)", 8: "itls over 604800 s (7 days)", 10: "output_lens exceeds int32",
        13: "input_lens exceeds int32", 16: "request_timestamps: beyond year 2262"}
    assert LONG_DIGITS.encode() in q[13]["raw"]


def _jsonl(path: Path, records: list) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else to_json(r).encode()) + b"\n" for r in records))
    return path


JSONL_POISON = {
    # line (1-based) → (record, reason)
    11: (jsonl_record(10, prompt_tokens=Raw(LONG_DIGITS)), "prompt_tokens exceeds int32"),
    22: (jsonl_record(21, output_tokens=Raw("-" + LONG_DIGITS)), "output_tokens is negative"),
    33: (jsonl_record(32, prompt_tokens=Raw("9" * 4000)), "prompt_tokens exceeds int32"),
    44: (jsonl_record(43, arrival_ts=Raw(LONG_DIGITS)), "arrival_ts: beyond year 2262"),
    55: (jsonl_record(54, end_ts=Raw("NaN")), "end_ts: not a finite number"),
    66: (jsonl_record(65, arrival_ts=1e300), "arrival_ts: beyond year 2262"),
}


def _jsonl_log(path: Path, n: int = 100) -> tuple[Path, list[str]]:
    records, good = [], []
    for i in range(n):
        if i + 1 in JSONL_POISON:
            records.append(JSONL_POISON[i + 1][0])
        else:
            records.append(jsonl_record(i))
            good.append(f"r{i:05d}")
    return _jsonl(path, records), good


def test_jsonl_poison_lines_are_quarantined_and_the_rest_stored(tmp_path):
    """Fault: 100 JSONL lines, 6 poison (token counts of 5,000 and 4,000 digits, -5,000 digits,
    an arrival of 5,000 digits or 1e300, end_ts NaN). Before: traceback (Python's int digit
    limit), nothing stored. Must: exit 0, 94 stored once, 6 quarantined with their reason."""
    log, good = _jsonl_log(tmp_path / "app.jsonl")
    data = tmp_path / "d"
    r = invoke("ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data))
    assert r.exit_code == 0, r.output
    assert stored_ids(data) == good
    assert {x["line_no"]: x["reason"] for x in quarantined(data)} == {n: why for n, (_, why) in JSONL_POISON.items()}
    assert "an integer of 5000 digits" not in r.output  # the count only, never the digits, in the summary
    assert invoke("ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data)).exit_code == 0  # again: nothing added
    assert stored_ids(data) == good and len(quarantined(data)) == len(JSONL_POISON)


def test_follow_moves_past_a_poison_line_across_restarts(tmp_path):
    """Fault: a followed log with a 5,000-digit prompt_tokens line; the follower stopped and
    restarted twice while the log grows. Before: the follower crashed at every start (the live
    log stalled for good). Must: the line quarantined once, every other line stored once, the
    checkpoint past it."""
    log = _jsonl(tmp_path / "app.jsonl", [jsonl_record(1), JSONL_POISON[11][0], jsonl_record(2)])
    checkpoint = tmp_path / "cp.json"
    for k in range(3):
        ingestor = Ingestor(tmp_path / "d", "jsonl")
        Follower([log], ingestor, checkpoint_path=checkpoint, flush_interval_s=0.1, poll_interval_s=0.05).run(
            threading.Event(), max_s=0.4)
        with log.open("ab") as fh:
            fh.write(to_json(jsonl_record(3 + k)).encode() + b"\n")
    assert stored_ids(tmp_path / "d") == ["r00001", "r00002", "r00003", "r00004"]
    assert [(x["line_no"], x["reason"]) for x in quarantined(tmp_path / "d")] == [(2, "prompt_tokens exceeds int32")]
    assert [p["line"] for p in json.loads(checkpoint.read_text())["files"]] == [6]  # the next line to read


def test_control_characters_from_records_cannot_forge_a_line(tmp_path, receiver):
    """Fault: endpoint names from a resource attribute carrying a newline and an ANSI escape
    (`vllm\\nerror: forged\\x1b[31m`), not in the inventory. Before: printed raw in the summary
    line and the receiver's warning, a forged `error:` line in the log. Must: escaped."""
    evil = "vllm\nerror: forged\x1b[31m"
    data = tmp_path / "d"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    log = tmp_path / "traces.jsonl"
    log.write_text(to_json(export_doc([span_dict(1)], service=evil)) + "\n")
    r = invoke("ingest", "requests", "--allow-unknown-endpoint", "--format", "otlp", "--endpoint-from", "service.name", str(log), "--data-dir", str(data))
    assert r.exit_code == 0, r.output
    assert not any(line.startswith("error:") for line in r.output.splitlines()), r.output
    assert "\x1b" not in r.output and "vllm\\x0aerror: forged\\x1b[31m (1)" in r.output
    url, _, rx, warnings = receiver
    assert _post(url, to_json(export_doc([span_dict(2)], service=evil)).encode(), "json")[0] == 0
    rx.flush()
    assert warnings and all("\n" not in w and "\x1b" not in w for w in warnings), warnings


def test_a_span_within_range_is_still_stored_exactly():
    """Control: a 6-day e2e and 2^31-1 tokens are inside the ranges (the bound is not too tight)."""
    from collectors.requests.otlp import map_request, parse_protobuf

    body = export_protobuf([span_dict(1, **{E2E: 6 * 86400.0}), span_dict(2, **{"gen_ai.usage.prompt_tokens": str(2**31 - 1)})])
    mapped = map_request(parse_protobuf(body), "t", endpoint="e")
    assert mapped.rejected == 0 and mapped.frame.height == 2
    assert mapped.frame["end_ts"][0] == DAY_START_NS + 10**9 + 6 * 86400 * 10**9
