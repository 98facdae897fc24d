"""OpenTelemetry traces → request rows: vLLM's ``llm_request`` spans, one mapping for the OTLP/HTTP
receiver (:mod:`collectors.requests.otlp_receiver`) and for OTLP JSON-lines files
(``ingest requests --format otlp``, the OpenTelemetry Collector's ``file`` exporter).

vLLM (``vllm serve --otlp-traces-endpoint URL``) emits one SERVER span named ``llm_request`` per
finished request, started at the request's arrival, with the engine's own timings as double
attributes in seconds (``vllm/tracing.py: SpanAttributes``). The mapping:

* ``arrival_ts`` = span start;
* ``first_token_ts`` = arrival + ``gen_ai.latency.time_to_first_token``;
* ``prefill_start_ts`` = first token − ``gen_ai.latency.time_in_model_prefill``; without it,
  arrival + ``gen_ai.latency.time_in_queue`` (measured inside the engine core, so it misses the
  front end); a prefill start that falls before the arrival (the two come from different
  processes' clocks) is taken as the arrival;
* ``end_ts`` = arrival + ``gen_ai.latency.e2e``, else the span's end;
* ``prompt_tokens`` / ``output_tokens`` = ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``;
* ``status`` = ``error`` when the span status is ERROR, else ``ok``;
* ``request_id`` = ``gen_ai.request.id``; ``endpoint`` = a fixed name, or a resource attribute.

Seconds become nanoseconds by ``floor(s × 1e9 + 0.5)``, as for vLLM bench results. Spans with
another name are counted and ignored (a Collector may forward every span of a trace); an
``llm_request`` span that cannot become a row is rejected with a reason and quarantined.
"""

from __future__ import annotations

import base64
import json
import math
from collections import Counter
from dataclasses import dataclass, field

import polars as pl
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from collectors.requests.quarantine import Reject
from collectors.requests.records import INT32_MAX, BadRecord, check_order
from collectors.requests.store import FRAME_SCHEMA, empty_frame
from collectors.requests.timestamps import utc_day

SPAN_NAME = "llm_request"
REQUEST_ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
TIME_IN_MODEL_PREFILL = "gen_ai.latency.time_in_model_prefill"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
E2E = "gen_ai.latency.e2e"
NOT_LLM_REQUEST = f"not an {SPAN_NAME} span"
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class BadBody(ValueError):
    """A request body that is not an ExportTraceServiceRequest (HTTP 400 / a quarantined line)."""


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        raise BadBody(f"not an OTLP protobuf ExportTraceServiceRequest ({exc})") from None
    return req


def parse_json(body: bytes | str) -> ExportTraceServiceRequest:
    """OTLP/JSON (the spec's JSON mapping: lowerCamelCase keys, trace and span ids as hex, int64 as
    strings or numbers, enums as integers; unknown fields ignored) to the protobuf message."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise BadBody("JSON nested too deep") from None
    except ValueError as exc:  # also an integer of more than 4300 digits
        raise BadBody(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadBody("not a JSON object")
    try:
        for rs in doc.get("resourceSpans") or ():
            for ss in rs.get("scopeSpans") or ():
                for span in ss.get("spans") or ():
                    _hex_ids_to_base64(span)
                    for link in span.get("links") or ():
                        _hex_ids_to_base64(link)
        return json_format.ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except RecursionError:
        raise BadBody("JSON nested too deep") from None
    except (json_format.ParseError, AttributeError, TypeError, ValueError) as exc:
        raise BadBody(f"not an OTLP JSON ExportTraceServiceRequest ({exc})") from None


def _hex_ids_to_base64(obj: dict) -> None:
    """protobuf's JSON mapping reads bytes as base64; OTLP/JSON writes ids as hex."""
    for key in _ID_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise BadBody(f"{key} {value[:40]!r} is not hex") from None


def to_json(message) -> bytes:
    """A message in OTLP/JSON (hex ids), compact: what quarantine keeps of a rejected span."""
    doc = json_format.MessageToDict(message)
    for key in _ID_FIELDS:
        if key in doc:
            doc[key] = base64.b64decode(doc[key]).hex()
    return json.dumps(doc, separators=(",", ":")).encode()


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(kvs) -> dict:
    """Scalar attributes as a dict (arrays and maps are not read)."""
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Mapped:
    """The rows and rejects of one request (or line), and what was skipped."""

    frame: pl.DataFrame
    rejects: list[Reject] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # spans that are not llm_request, by reason
    endpoints: Counter = field(default_factory=Counter)  # rows per endpoint

    @property
    def rejected(self) -> int:
        return len(self.rejects)


def _seconds(attrs: dict, name: str, required: bool) -> int | None:
    value = attrs.get(name)
    if value is None:
        if required:
            raise BadRecord(f"missing attribute {name}")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise BadRecord(f"{name} must be a non-negative number of seconds, got {value!r}")
    return math.floor(value * 1e9 + 0.5)


def _tokens(attrs: dict, name: str) -> int:
    value = attrs.get(name)
    if value is None:
        raise BadRecord(f"missing attribute {name}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise BadRecord(f"{name} must be an integer in 0..2^31-1, got {value!r}")
    return value


def span_row(span, endpoint: str) -> dict:
    """One ``llm_request`` span → a contract row (timestamps in epoch ns), or :class:`BadRecord`."""
    attrs = attributes(span.attributes)
    request_id = attrs.get(REQUEST_ID)
    if not isinstance(request_id, str) or not request_id:
        raise BadRecord(f"missing attribute {REQUEST_ID}")
    arrival = span.start_time_unix_nano
    if arrival <= 0:
        raise BadRecord("span has no start time")
    ttft = _seconds(attrs, TIME_TO_FIRST_TOKEN, required=True)
    first_token = arrival + ttft
    prefill = _seconds(attrs, TIME_IN_MODEL_PREFILL, required=False)
    if prefill is not None:
        prefill_start = first_token - prefill
    else:
        queue = _seconds(attrs, TIME_IN_QUEUE, required=False)
        prefill_start = None if queue is None else min(arrival + queue, first_token)
    if prefill_start is not None:
        prefill_start = max(prefill_start, arrival)
    e2e = _seconds(attrs, E2E, required=False)
    if e2e is not None:
        end = arrival + e2e
    elif span.end_time_unix_nano > 0:
        end = span.end_time_unix_nano
    else:
        raise BadRecord(f"missing attribute {E2E} and no span end time")
    row = {
        "request_id": request_id,
        "endpoint": endpoint,
        "arrival_ts": arrival,
        "prefill_start_ts": prefill_start,
        "first_token_ts": first_token,
        "end_ts": end,
        "prompt_tokens": _tokens(attrs, PROMPT_TOKENS),
        "output_tokens": _tokens(attrs, COMPLETION_TOKENS),
        "status": "error" if span.status.code == Status.STATUS_CODE_ERROR else "ok",
    }
    check_order(row)
    return row


def map_request(req: ExportTraceServiceRequest, source: str, line_no: int = 0, *,
                endpoint: str | None = None, endpoint_from: str | None = None) -> Mapped:
    """Every span of ``req`` → rows (FRAME_SCHEMA), rejects and skip counts.

    The endpoint is ``endpoint`` when given, else the resource attribute ``endpoint_from`` (a span
    attribute of that name when the resource has none). ``source`` and ``line_no`` say where the
    spans came from in quarantine (the file and line, or the receiver's address).
    """
    if (endpoint is None) == (endpoint_from is None):
        raise ValueError("give exactly one of endpoint, endpoint_from")
    rows, rejects, skipped, endpoints = [], [], Counter(), Counter()
    for rs in req.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                if span.name != SPAN_NAME:
                    skipped[NOT_LLM_REQUEST] += 1
                    continue
                raw = to_json(span)
                try:
                    name = endpoint
                    if name is None:
                        name = resource.get(endpoint_from)
                        if name is None:
                            name = attributes(span.attributes).get(endpoint_from)
                        if not isinstance(name, str) or not name:
                            raise BadRecord(f"no resource attribute {endpoint_from} (--endpoint-from)")
                    row = span_row(span, name)
                except BadRecord as exc:
                    day = utc_day(span.start_time_unix_nano) if span.start_time_unix_nano > 0 else None
                    rejects.append(Reject(source, line_no, str(exc), raw, len(raw), day))
                    continue
                row.update(_src=source, _line=line_no, _raw=raw)
                rows.append(row)
                endpoints[row["endpoint"]] += 1
    frame = pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row") if rows else empty_frame()
    return Mapped(frame, rejects, skipped, endpoints)


def read_otlp_lines(path, *, endpoint: str | None, endpoint_from: str | None, max_line_bytes: int,
                    on_bytes=lambda n: None):
    """Yield a :class:`Mapped` per line of an OTLP JSON-lines file (one ExportTraceServiceRequest
    per line, as the Collector's ``file`` exporter writes); a bad line is one reject."""
    source = str(path)
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, start=1):
            on_bytes(len(line))
            data = line.rstrip(b"\r\n")
            if not data.strip():
                continue
            if len(data) > max_line_bytes:
                yield Mapped(empty_frame(), [Reject(source, n, "line too long", data[:4096], len(data))])
                continue
            try:
                req = parse_json(data)
            except BadBody as exc:
                yield Mapped(empty_frame(), [Reject(source, n, f"invalid OTLP JSON: {exc}", data, len(data))])
                continue
            yield map_request(req, source, n, endpoint=endpoint, endpoint_from=endpoint_from)
