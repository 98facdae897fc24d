"""An OTLP/HTTP trace receiver (``POST /v1/traces``) that writes vLLM's ``llm_request`` spans as
request rows, with the durability of ``ingest requests --follow``.

Protocol (OTLP/HTTP): bodies are ``application/x-protobuf`` or ``application/json`` (OTLP/JSON),
optionally ``Content-Encoding: gzip``; the answer is an ``ExportTraceServiceResponse`` in the
request's encoding: HTTP 200, with ``partial_success`` (``rejected_spans`` and a message) when
some ``llm_request`` spans could not become rows or a warning is due. A body that cannot be
decoded gets 400 with a ``google.rpc.Status`` (exporters do not retry a 400); a full buffer
(flushes failing, e.g. disk full) gets 503 with ``Retry-After`` (exporters retry that later).

Durability: accepted rows wait in memory and are committed every ``flush_interval_s`` through
:meth:`Ingestor.commit` (the same atomic, deduplicated store and quarantine as the file
ingestion and ``--follow``), and on shutdown. A kill -9 loses at most the spans accepted since
the last flush; a span sent twice (an exporter's retry) is stored once.

Server: the standard library's ``ThreadingHTTPServer``: one thread per connection is plenty for
the few exporters (one per vLLM server, or one Collector) that send batches every few seconds,
and it needs no dependency; it binds loopback unless told otherwise (see ``collectors.names``).
"""

from __future__ import annotations

import json
import sys
import threading
import zlib
from collections import Counter
from dataclasses import replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collectors.printable import printable
from collectors.requests.ingestor import Ingestor
from collectors.requests.otlp import BadBody, Mapped, map_body
from collectors.requests.quarantine import Reject
from collectors.requests.store import empty_frame

TRACES_PATH = "/v1/traces"
PATHS = (TRACES_PATH, "/")
"""vLLM hands ``--otlp-traces-endpoint`` to the HTTP exporter verbatim: a URL without the path posts to /."""
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_BODY_BYTES = 64 << 20
"""Largest body accepted, before and after gzip (the Python SDK's default request limit)."""
MAX_PENDING_ROWS = 500_000
"""Rows waiting for a flush beyond which new exports get 503 (flushes are failing)."""


class Receiver:
    """The state shared by the HTTP threads and the flusher: pending rows and counts."""

    def __init__(self, ingestor: Ingestor, *, endpoint: str | None = None, endpoint_from: str | None = None,
                 flush_interval_s: float = 5.0, source: str = "otlp-http",
                 warn=lambda msg: print(f"warning: {msg}", file=sys.stderr)) -> None:
        self.ingestor = ingestor
        self.endpoint = endpoint
        self.endpoint_from = endpoint_from
        self.flush_interval_s = flush_interval_s
        self.source = source
        self.warn = warn
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._frames: list[pl.DataFrame] = []
        self._rejects: list[Reject] = []
        self._pending_rows = 0
        self._warned_endpoints: set[str] = set()
        self.exports = 0
        self.bad_bodies = 0

    # ---- called by HTTP threads

    def accept(self, body: bytes, content_type: str) -> Mapped:
        """Decode and map one export; the rows wait for the next flush. Raises :class:`BadBody`."""
        mapped = map_body(body, is_json=content_type == JSON, source=self.source, endpoint=self.endpoint,
                          endpoint_from=self.endpoint_from)
        if self.ingestor.unknown_endpoint == "quarantine":  # rejected now, so the exporter hears of it
            mapped = _screened(mapped, self.ingestor)
        with self._lock:
            self._frames.append(mapped.frame)
            self._rejects += mapped.rejects
            self._pending_rows += mapped.frame.height
            self.ingestor.summary.add_mapped(mapped)
            self.exports += 1
        return mapped

    def count_bad_body(self) -> None:
        with self._lock:
            self.bad_bodies += 1

    def full(self) -> bool:
        return self._pending_rows >= MAX_PENDING_ROWS

    def unknown_endpoints(self, mapped: Mapped) -> list[str]:
        known = self.ingestor.summary.known_endpoints
        return [] if known is None else sorted(e for e in mapped.endpoints if e not in known)

    # ---- the flusher

    def flush(self) -> None:
        """Commit what is pending (atomic Parquet files, deduplicated); on failure it stays pending."""
        with self._flush_lock:
            with self._lock:
                frames, rejects = self._frames, self._rejects
                self._frames, self._rejects = [], []
            if not frames and not rejects:
                return
            try:
                self.ingestor.commit(pl.concat(frames) if frames else empty_frame(), rejects)
            except BaseException:
                with self._lock:
                    self._frames[:0] = frames
                    self._rejects[:0] = rejects
                raise
            with self._lock:
                self._pending_rows -= sum(f.height for f in frames)
            new = sorted(set(self.ingestor.summary.unknown_endpoints()) - self._warned_endpoints)
            if new:
                self._warned_endpoints.update(new)
                self.warn(f"spans of endpoint(s) not in inventory.yaml: {printable(', '.join(new))} "
                          "(ingested; add them to the inventory to attribute their energy)")

    def run_flusher(self, stop: threading.Event) -> None:
        while not stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except OSError as exc:  # e.g. disk full: keep the rows, retry next interval
                self.warn(f"flush failed, will retry: {exc}")


def _screened(mapped: Mapped, ingestor: Ingestor) -> Mapped:
    """``mapped`` with its spans of unknown endpoints moved to its rejects (quarantined with the reason)."""
    frame, unknown = ingestor.split_unknown_endpoints(mapped.frame)
    if not unknown:
        return mapped
    endpoints = Counter({k: n for k, n in mapped.endpoints.items() if k in (ingestor.known or ())})
    return replace(mapped, frame=frame, rejects=mapped.rejects + unknown, endpoints=endpoints)


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _gunzip(body: bytes) -> bytes:
    """Decompress at most MAX_BODY_BYTES (a small body must not expand without bound)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise BadBody(f"bad gzip body ({exc})") from None
    if len(out) > MAX_BODY_BYTES or d.unconsumed_tail:
        raise BadBody(f"body larger than {MAX_BODY_BYTES} bytes after gzip")
    return out


def make_handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "wattline-otlp"

        def log_message(self, fmt, *args):  # quiet: exporters post every few seconds
            pass

        def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str, content_type: str, extra: dict | None = None) -> None:
            if content_type == JSON:
                body = json.dumps({"code": 3, "message": message}).encode()
            else:
                body = rpc_status_protobuf(3, message)
                content_type = PROTOBUF
            self._send(status, body, content_type, extra)

        def do_POST(self):  # noqa: N802 (http.server's name)
            content_type = _media_type(self.headers.get("Content-Type"))
            reply_type = JSON if content_type == JSON else PROTOBUF
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self.close_connection = True
                return self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length required", reply_type)
            if length < 0 or length > MAX_BODY_BYTES:
                self.close_connection = True
                return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes", reply_type)
            body = self.rfile.read(length)
            if self.path.split("?", 1)[0] not in PATHS:
                return self._error(HTTPStatus.NOT_FOUND, f"only {TRACES_PATH} is served (traces)", reply_type)
            if content_type not in (PROTOBUF, JSON):
                return self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                                   f"Content-Type must be {PROTOBUF} or {JSON}", reply_type)
            if receiver.full():
                return self._error(HTTPStatus.SERVICE_UNAVAILABLE, "buffer full: flushes are failing", reply_type,
                                   {"Retry-After": str(max(1, round(receiver.flush_interval_s)))})
            try:
                encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
                if encoding == "gzip":
                    body = _gunzip(body)
                elif encoding != "identity":
                    raise BadBody(f"Content-Encoding {encoding!r} is not supported (use gzip or none)")
                mapped = receiver.accept(body, content_type)
            except BadBody as exc:
                receiver.count_bad_body()
                return self._error(HTTPStatus.BAD_REQUEST, str(exc), reply_type)
            response = ExportTraceServiceResponse()
            messages = []
            if mapped.rejected:
                response.partial_success.rejected_spans = mapped.rejected
                reasons = sorted({r.reason for r in mapped.rejects})
                messages.append(f"{mapped.rejected} llm_request span(s) rejected: {'; '.join(reasons[:5])}")
            unknown = receiver.unknown_endpoints(mapped)
            if unknown:
                messages.append(f"endpoint(s) not in wattline's inventory.yaml: {', '.join(unknown[:10])}")
            if messages:
                response.partial_success.error_message = "; ".join(messages)
            if reply_type == JSON:
                body = json_format.MessageToJson(response, indent=None).encode()
            else:
                body = response.SerializeToString()
            self._send(HTTPStatus.OK, body, reply_type)

        def do_GET(self):  # noqa: N802
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"POST OTLP traces to {TRACES_PATH}", JSON, {"Allow": "POST"})

    return Handler


def rpc_status_protobuf(code: int, message: str) -> bytes:
    """google.rpc.Status{code=1: int32, message=2: string} in protobuf wire format (built by hand:
    two fields do not justify a dependency on googleapis-common-protos)."""
    msg = message.encode()
    return bytes([0x08]) + _varint(code) + bytes([0x12]) + _varint(len(msg)) + msg


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def serve(receiver: Receiver, host: str, port: int, stop: threading.Event,
          ready=lambda address: None) -> None:
    """Serve until ``stop`` is set; then stop accepting, and flush what is pending."""
    server = ThreadingHTTPServer((host, port), make_handler(receiver))
    server.daemon_threads = True
    flusher = threading.Thread(target=receiver.run_flusher, args=(stop,), name="otlp-flush", daemon=True)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="otlp-http", daemon=True)
    flusher.start()
    serving.start()
    ready(server.server_address)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        flusher.join(timeout=5)
        receiver.flush()
