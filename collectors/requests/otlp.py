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
* ``max_tokens`` = ``gen_ai.request.max_tokens`` (the requested output length), null without it;
* ``replica`` = the resource attribute ``service.instance.id`` (the engine instance that emitted the
  span, so the replica that served the request), null without it;
* ``status`` = ``error`` when the span status is ERROR, else ``ok``;
* ``request_id`` = ``gen_ai.request.id``; ``endpoint`` = a fixed name, or a resource attribute.

Seconds become nanoseconds by ``floor(s × 1e9 + 0.5)``, as for vLLM bench results, after their
range is checked (finite, 0..7 days); the span start must fall on a day the pipeline can run and
the request may last at most 7 days. Spans with another name are counted and ignored (a Collector
may forward every span of a trace); an ``llm_request`` span that cannot become a row is rejected
with a reason and quarantined, alone: the other spans of its export (or line) are kept. In OTLP/JSON
a span the protobuf mapping cannot read (a time past 2⁶⁴, an integer of thousands of digits, an id
that is not hex) is such a span too; only a body that is not an export at all is refused whole.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from collectors.printable import printable
from collectors.requests.quarantine import Reject
from collectors.requests.records import (
    INT32_MAX,
    BadRecord,
    arrival_problem,
    check_derived_times,
    dumps_exact,
    loads,
    optional_replica,
    seconds_to_ns,
    shown,
)
from collectors.requests.store import empty_frame, rows_to_frame
from collectors.requests.timestamps import utc_day

SPAN_NAME = "llm_request"
REQUEST_ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
SERVICE_INSTANCE_ID = "service.instance.id"
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


@dataclass(frozen=True)
class BadSpan:
    """A span of an OTLP/JSON body that the protobuf mapping cannot read: quarantined alone."""

    raw: bytes
    reason: str
    name: Any


_SPAN_ERRORS = (json_format.ParseError, AttributeError, TypeError, ValueError, RecursionError)


def parse_json(body: bytes | str) -> ExportTraceServiceRequest:
    """OTLP/JSON to the protobuf message, refusing the whole body when any span is unreadable
    (:func:`parse_json_spans` sets such spans aside instead)."""
    req, bad = parse_json_spans(body)
    if bad:
        raise BadBody(f"not an OTLP JSON ExportTraceServiceRequest ({bad[0].reason})")
    return req


def parse_json_spans(body: bytes | str) -> tuple[ExportTraceServiceRequest, list[BadSpan]]:
    """OTLP/JSON (the spec's JSON mapping: lowerCamelCase keys, trace and span ids as hex, int64 as
    strings or numbers, enums as integers; unknown fields ignored) to the protobuf message, plus
    the spans it could not read (left out of the message). :class:`BadBody` only when the body
    itself is not an export: not JSON, or a resource or scope level that is not one."""
    try:
        doc = loads(body)
    except RecursionError:
        raise BadBody("JSON nested too deep") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise BadBody(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadBody("not a JSON object")
    bad: list[BadSpan] = []
    try:
        scopes = []  # (scope dict, [(span, its original ids)])
        for rs in doc.get("resourceSpans") or ():
            for ss in rs.get("scopeSpans") or ():
                kept = []
                for span in ss.get("spans") or ():
                    if not isinstance(span, dict):
                        bad.append(BadSpan(dumps_exact(span), "invalid OTLP span: not a JSON object", None))
                        continue
                    ids = {k: span[k] for k in _ID_FIELDS if k in span}
                    try:
                        _hex_ids_to_base64(span)
                        for link in span.get("links") or ():
                            if isinstance(link, dict):
                                _hex_ids_to_base64(link)
                    except BadBody as exc:
                        bad.append(_bad_span(span, ids, f"invalid OTLP span: {exc}"))
                        continue
                    kept.append((span, ids))
                scopes.append((ss, kept))
                ss["spans"] = [span for span, _ in kept]
        try:
            return json_format.ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=True), bad
        except _SPAN_ERRORS:
            pass
        for ss, kept in scopes:  # find the spans that fail, one by one; the rest are kept
            good = []
            for span, ids in kept:
                try:
                    json_format.ParseDict(span, Span(), ignore_unknown_fields=True)
                except _SPAN_ERRORS as exc:
                    bad.append(_bad_span(span, ids, f"invalid OTLP span: {printable(exc, 300)}"))
                    continue
                good.append(span)
            ss["spans"] = good
        return json_format.ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=True), bad
    except _SPAN_ERRORS as exc:
        raise BadBody(f"not an OTLP JSON ExportTraceServiceRequest ({printable(exc, 300)})") from None


def _bad_span(span: dict, ids: dict, reason: str) -> BadSpan:
    """The span as it came (its hex ids back in place), its reason and its name."""
    return BadSpan(dumps_exact({**span, **ids}), reason, span.get("name"))


def _hex_ids_to_base64(obj: dict) -> None:
    """protobuf's JSON mapping reads bytes as base64; OTLP/JSON writes ids as hex."""
    for key in _ID_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise BadBody(f"{key} {shown(value)} is not hex") from None


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
    return seconds_to_ns(value, name)


def _tokens(attrs: dict, name: str, required: bool = True) -> int | None:
    value = attrs.get(name)
    if value is None:
        if not required:
            return None
        raise BadRecord(f"missing attribute {name}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise BadRecord(f"{name} must be an integer in 0..2^31-1, got {shown(value)}")
    return value


def span_row(span, endpoint: str, resource: dict | None = None) -> dict:
    """One ``llm_request`` span → a contract row (timestamps in epoch ns), or :class:`BadRecord`;
    ``resource``: its resource's attributes (the replica's ``service.instance.id``)."""
    attrs = attributes(span.attributes)
    request_id = attrs.get(REQUEST_ID)
    if not isinstance(request_id, str) or not request_id:
        raise BadRecord(f"missing attribute {REQUEST_ID}")
    arrival = span.start_time_unix_nano
    if arrival <= 0:
        raise BadRecord("span has no start time")
    problem = arrival_problem(arrival)  # before any arithmetic: a start past 2**63 fits no row
    if problem:
        raise BadRecord(problem)
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
        "max_tokens": _tokens(attrs, MAX_TOKENS, required=False),
        "replica": optional_replica((resource or {}).get(SERVICE_INSTANCE_ID), f"resource attribute {SERVICE_INSTANCE_ID}"),
    }
    check_derived_times(row)
    return row


def map_body(body: bytes, *, is_json: bool, source: str, endpoint: str | None = None,
             endpoint_from: str | None = None) -> Mapped:
    """One export body (after gzip), protobuf or OTLP/JSON, → :class:`Mapped`: every span that can
    become a row, a reject for each ``llm_request`` span that cannot (also a JSON span the protobuf
    mapping cannot read). Raises :class:`BadBody` only when the body as a whole is not an export."""
    req, bad = parse_json_spans(body) if is_json else (parse_protobuf(body), [])
    return map_request(req, source, endpoint=endpoint, endpoint_from=endpoint_from, bad_spans=bad)


def map_request(req: ExportTraceServiceRequest, source: str, line_no: int = 0, *,
                endpoint: str | None = None, endpoint_from: str | None = None,
                bad_spans: list[BadSpan] | tuple = ()) -> Mapped:
    """Every span of ``req`` → rows (FRAME_SCHEMA), rejects and skip counts; ``bad_spans`` (from
    :func:`parse_json_spans`) become rejects too, those named other than ``llm_request`` skips.

    The endpoint is ``endpoint`` when given, else the resource attribute ``endpoint_from`` (a span
    attribute of that name when the resource has none). ``source`` and ``line_no`` say where the
    spans came from in quarantine (the file and line, or the receiver's address).
    """
    if (endpoint is None) == (endpoint_from is None):
        raise ValueError("give exactly one of endpoint, endpoint_from")
    rows, rejects, skipped, endpoints = [], [], Counter(), Counter()
    for bad in bad_spans:
        if isinstance(bad.name, str) and bad.name != SPAN_NAME:
            skipped[NOT_LLM_REQUEST] += 1
        else:
            rejects.append(Reject(source, line_no, bad.reason, bad.raw, len(bad.raw)))
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
                    row = span_row(span, name, resource)
                except BadRecord as exc:
                    rejects.append(Reject(source, line_no, str(exc), raw, len(raw), _reject_day(span)))
                    continue
                except Exception as exc:  # a span no check foresaw: it alone is quarantined, never its export
                    reason = f"span could not be mapped ({type(exc).__name__}: {printable(exc, 200)})"
                    rejects.append(Reject(source, line_no, reason, raw, len(raw)))
                    continue
                row.update(_src=source, _line=line_no, _raw=raw)
                rows.append(row)
    frame, unfit = rows_to_frame(rows)
    kept = Counter(frame["endpoint"].to_list()) if unfit else Counter(r["endpoint"] for r in rows)
    endpoints.update(kept)
    return Mapped(frame, rejects + unfit, skipped, endpoints)


def _reject_day(span) -> str | None:
    """The quarantine day of a rejected span: its start's, when that is a day the pipeline can run."""
    start = span.start_time_unix_nano
    return utc_day(start) if start > 0 and arrival_problem(start) is None else None


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
                req, bad = parse_json_spans(data)
            except BadBody as exc:
                yield Mapped(empty_frame(), [Reject(source, n, f"invalid OTLP JSON: {exc}", data, len(data))])
                continue
            yield map_request(req, source, n, endpoint=endpoint, endpoint_from=endpoint_from, bad_spans=bad)
