"""Poison records for the request importers: one record with a value out of every range (a
latency of 1e12 s or 1e300 s, NaN, a start past 2⁶³, a token count of 5,000 digits), put among
good ones, in each importer's own format. Shared by test_poison_records and its property test."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.requests.quarantine import read_quarantine
from tests.otlp_sender import DAY_START_NS

LONG_DIGITS = "9" * 5000
"""An integer Python refuses to convert (over 4300 digits)."""


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (a number JSON allows but Python's json would not write)."""

    text: str


def to_json(value) -> str:
    """``json.dumps`` that writes :class:`Raw` values verbatim and non-finite floats as NaN/Infinity."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


def jsonl_record(i: int, **override) -> dict:
    start = DAY_START_NS + i * 1_000_000_000
    rec = {"request_id": f"r{i:05d}", "endpoint": "e", "arrival_ts": start, "first_token_ts": start + 50_000_000,
           "end_ts": start + 900_000_000, "prompt_tokens": 100 + i, "output_tokens": 10 + i % 7}
    rec.update(override)
    return rec


def bench_doc(n: int, poison: dict[int, dict]) -> dict:
    """A vLLM bench results document of ``n`` requests; ``poison[i]`` replaces request i's entries."""
    doc = {"model_id": "m", "request_timestamps": [], "input_lens": [], "output_lens": [], "ttfts": [], "itls": []}
    for i in range(n):
        entry = {"request_timestamps": DAY_START_NS / 1e9 + 10 + i, "input_lens": 100 + i, "output_lens": 5,
                 "ttfts": 0.05, "itls": [0.01, 0.02, 0.01, 0.03]}
        entry.update(poison.get(i, {}))
        for k, v in entry.items():
            doc[k].append(v)
    return doc


SPAN_NS = 700_000_000
"""How long each span of span_dict lasts (end = start + SPAN_NS)."""


def span_dict(i: int, *, start_ns: int | None = None, name: str = "llm_request", **attrs) -> dict:
    """One llm_request span in OTLP/JSON (ids as hex); ``attrs`` override the vLLM attributes
    (a value of :class:`Raw` is written as it is, as a double unless its key ends in _tokens)."""
    start = DAY_START_NS + i * 1_000_000_000 if start_ns is None else start_ns
    values = {"gen_ai.request.id": f"cmpl-{i:05d}", "gen_ai.usage.prompt_tokens": 100 + i,
              "gen_ai.usage.completion_tokens": 20, "gen_ai.latency.time_to_first_token": 0.08,
              "gen_ai.latency.e2e": 0.6, "gen_ai.latency.time_in_model_prefill": 0.05}
    values.update(attrs)
    kvs = []
    for k, v in values.items():
        kind = "intValue" if k.endswith("_tokens") else "stringValue" if isinstance(v, str) else "doubleValue"
        kvs.append({"key": k, "value": {kind: v}})
    return {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": name, "kind": 2,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + SPAN_NS), "attributes": kvs}


def export_doc(spans: list[dict], service: str = "vllm-a") -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                               "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": spans}]}]}


def export_protobuf(spans: list[dict]) -> bytes:
    """The same export in protobuf; ``spans`` must fit protobuf's types (no Raw past int64)."""
    doc = json.loads(to_json(export_doc(spans)))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId"):
                    span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


def stored_ids(data: Path) -> list[str]:
    """Every stored request id, repeats included (so 'stored once' can be checked)."""
    files = sorted((data / "requests").glob("date=*/*.parquet"))
    return sorted(pa.concat_tables([pq.read_table(f, columns=["request_id"]) for f in files]).column(0).to_pylist()) if files else []


def quarantined(data: Path) -> list[dict]:
    return read_quarantine(data).to_pylist()

