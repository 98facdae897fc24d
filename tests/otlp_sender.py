"""A stand-in for `vllm serve --otlp-traces-endpoint URL`: the official OpenTelemetry SDK emitting
vLLM-shaped `llm_request` spans (as vllm/v1/engine/output_processor.py does: a SERVER span started
at the request's arrival, the engine's timings as double attributes in seconds), exported over
OTLP/HTTP in protobuf (the SDK's exporter) or in OTLP/JSON (the same request, JSON-encoded).

Run as a script: ``python tests/otlp_sender.py URL protobuf|json FIRST COUNT`` sends requests
FIRST..FIRST+COUNT-1 one export each and prints each acknowledged id with its time.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import time
from dataclasses import dataclass

import requests
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

DAY_START_NS = 1_795_996_800 * 10**9  # 2026-11-30T00:00:00Z (tests.builders.DAY)


@dataclass(frozen=True)
class FakeRequest:
    """One request as vLLM's engine saw it; times in seconds after the day's start (floats, as vLLM's)."""

    request_id: str
    arrival_s: float
    queue_s: float
    prefill_s: float
    ttft_s: float
    e2e_s: float
    prompt_tokens: int
    output_tokens: int
    error: bool = False

    @property
    def arrival_ns(self) -> int:
        return DAY_START_NS + round(self.arrival_s * 1e9)


def fake_request(i: int, base_s: float = 10.0) -> FakeRequest:
    """Request i: irregular times (not on any grid), each one second after the last."""
    return FakeRequest(
        request_id=f"cmpl-{i:05d}",
        arrival_s=base_s + i * 1.0 + (i * 0.1234567) % 0.3,
        queue_s=0.001 + (i % 7) * 0.0013,
        prefill_s=0.05 + (i % 5) * 0.0111,
        ttft_s=0.08 + (i % 5) * 0.0111 + (i % 3) * 0.0017,
        e2e_s=0.6 + (i % 4) * 0.0731,
        prompt_tokens=100 + 7 * i,
        output_tokens=20 + i % 9,
        error=(i % 11 == 10),
    )


def emit(tracer, req: FakeRequest, *, name: str = "llm_request", drop: tuple[str, ...] = ()) -> None:
    attrs = {
        "gen_ai.response.model": "Qwen/Qwen3-8B",
        "gen_ai.request.id": req.request_id,
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.n": 1,
        "gen_ai.usage.prompt_tokens": req.prompt_tokens,
        "gen_ai.usage.completion_tokens": req.output_tokens,
        "gen_ai.latency.time_in_queue": req.queue_s,
        "gen_ai.latency.time_to_first_token": req.ttft_s,
        "gen_ai.latency.e2e": req.e2e_s,
        "gen_ai.latency.time_in_model_prefill": req.prefill_s,
        "gen_ai.latency.time_in_model_decode": req.e2e_s - req.ttft_s,
        "gen_ai.latency.time_in_model_inference": req.e2e_s - req.ttft_s + req.prefill_s,
    }
    span = tracer.start_span(name, kind=SpanKind.SERVER, start_time=req.arrival_ns)
    for k, v in attrs.items():
        if k not in drop:
            span.set_attribute(k, v)
    if req.error:
        span.set_status(Status(StatusCode.ERROR, "aborted"))
    # vLLM ends the span when it processes the finished request: a little after arrival + e2e.
    span.end(end_time=req.arrival_ns + round(req.e2e_s * 1e9) + 3_000_000)


def otlp_json(spans) -> bytes:
    """The ExportTraceServiceRequest the SDK would send, in OTLP/JSON (ids as hex, not base64)."""
    doc = json_format.MessageToDict(encode_spans(spans))
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(doc).encode()


class JsonExporter(SpanExporter):
    """POSTs OTLP/JSON (gzip) and keeps each response, to check partial_success."""

    def __init__(self, url: str, compress: bool = True) -> None:
        self.url = url
        self.compress = compress
        self.responses: list[requests.Response] = []

    def export(self, spans) -> SpanExportResult:
        body = otlp_json(spans)
        headers = {"Content-Type": "application/json"}
        if self.compress:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        resp = requests.post(self.url, data=body, headers=headers, timeout=10)
        self.responses.append(resp)
        return SpanExportResult.SUCCESS if resp.status_code == 200 else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def tracer_for(url: str, protocol: str, service: str = "vllm-a", **resource):
    """A tracer whose every span is exported at once (SimpleSpanProcessor), and its exporter."""
    exporter = OTLPSpanExporter(endpoint=url, timeout=10) if protocol == "protobuf" else JsonExporter(url)
    provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("vllm.llm_engine"), provider, exporter


class _Acked(SpanExporter):
    """Wraps the SDK's exporter and prints each acknowledged export (for the kill -9 test)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def export(self, spans) -> SpanExportResult:
        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            for s in spans:
                print(f"{s.attributes['gen_ai.request.id']} {time.monotonic():.6f}", flush=True)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


def main(url: str, protocol: str, first: int, count: int, pause_s: float = 0.02) -> None:
    exporter = OTLPSpanExporter(endpoint=url, timeout=2) if protocol == "protobuf" else JsonExporter(url)
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm-a"}))
    provider.add_span_processor(SimpleSpanProcessor(_Acked(exporter)))
    tracer = provider.get_tracer("vllm.llm_engine")
    for i in range(first, first + count):
        emit(tracer, fake_request(i))
        time.sleep(pause_s)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
