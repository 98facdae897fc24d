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

Server: the standard library's ``ThreadingHTTPServer`` (no dependency), bounded so that no client
can take its memory or its threads (:class:`Limits`): at most ``max_connections`` connections are
served at once, each by its own thread; a request must arrive within ``request_timeout_s`` (a
slow client is disconnected), and when every connection is taken a new one displaces the one that
has waited longest for its request, or gets 503. Bodies held at once (received and inflated) are
bounded in bytes, and at most ``max_decoding`` are decoded at once, each checked first
(:mod:`collectors.requests.otlp_body`); a body over a limit gets 413, a busy receiver 503 with
``Retry-After`` (exporters retry those). A client that goes away early is one counted log line.
It binds loopback unless told otherwise (see ``collectors.names``).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collectors.printable import printable
from collectors.requests.ingestor import Ingestor
from collectors.requests.otlp import BadBody, Mapped, map_body
from collectors.requests.otlp_body import DEFAULT_MAX_ITEMS, BodyTooLarge, check_body, gunzip
from collectors.requests.quarantine import Reject
from collectors.requests.store import empty_frame

TRACES_PATH = "/v1/traces"
PATHS = (TRACES_PATH, "/")
"""vLLM hands ``--otlp-traces-endpoint`` to the HTTP exporter verbatim: a URL without the path posts to /."""
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_PENDING_ROWS = 500_000
"""Rows waiting for a flush beyond which new exports get 503 (flushes are failing)."""


@dataclass(frozen=True)
class Limits:
    """What one receiver may spend on its clients. The defaults keep it under ~1 GB whatever
    they send (measured: docs/connect.md) and admit every batch an exporter sends by default."""

    max_body_bytes: int = 20 << 20
    """Largest body, before and after gzip (413 past it): the OpenTelemetry Collector's own OTLP/HTTP
    receiver default (20 MiB), so whatever a Collector would accept is accepted; vLLM's batches
    of 512 spans are ~0.5 MB."""
    max_inflight_bytes: int = 128 << 20
    """Bytes of bodies held at once, received and inflated (a request over it waits, then 503)."""
    max_decoding: int = 2
    """Bodies decoded at once (one per core of a small host; decoding holds the GIL anyway)."""
    max_items: int = DEFAULT_MAX_ITEMS
    """Messages (protobuf) or values (JSON) per body: what bounds a decoded body's memory."""
    max_connections: int = 64
    """Connections served at once, one thread each (exporters keep one or two open)."""
    request_timeout_s: float = 10.0
    """Time a client has to send a whole request (head and body), and its idle time between requests."""
    busy_wait_s: float = 2.0
    """How long a request waits for memory or a decoding slot before 503 ``Retry-After``."""

    def problem(self) -> str | None:
        if self.max_inflight_bytes < self.max_body_bytes:
            return "the bytes in flight must be at least the largest body"
        if min(self.max_decoding, self.max_connections, self.max_items, self.max_body_bytes) < 1:
            return "every limit must be at least 1"
        return None


class Busy(Exception):
    """No memory or decoding slot came free in time (HTTP 503 with Retry-After)."""


class Budget:
    """The bytes of bodies held at once and the bodies decoded at once, shared by every connection."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._cond = threading.Condition()
        self._bytes = 0
        self._decoding = threading.BoundedSemaphore(limits.max_decoding)
        self.peak_bytes = 0

    def reserve(self, n: int, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        with self._cond:
            while self._bytes + n > self.limits.max_inflight_bytes:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    if self._bytes + n > self.limits.max_inflight_bytes:
                        raise Busy(f"busy: {self._bytes} bytes of bodies in flight")
            self._bytes += n
            self.peak_bytes = max(self.peak_bytes, self._bytes)

    def release(self, n: int) -> None:
        with self._cond:
            self._bytes -= n
            self._cond.notify_all()

    @contextmanager
    def decoding(self):
        if not self._decoding.acquire(timeout=self.limits.busy_wait_s):
            raise Busy(f"busy: {self.limits.max_decoding} bodies being decoded")
        try:
            yield
        finally:
            self._decoding.release()


class Receiver:
    """The state shared by the HTTP threads and the flusher: pending rows and counts."""

    def __init__(self, ingestor: Ingestor, *, endpoint: str | None = None, endpoint_from: str | None = None,
                 flush_interval_s: float = 5.0, source: str = "otlp-http", limits: Limits | None = None,
                 warn=lambda msg: print(f"warning: {printable(msg)}", file=sys.stderr)) -> None:
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
        self.limits = limits or Limits()
        self.budget = Budget(self.limits)
        self.too_large = 0  # bodies refused with 413
        self.busy = 0  # requests answered 503: no memory, decoding slot or connection free in time
        self.disconnects = 0  # clients gone (or too slow) before their request was complete
        self._last_disconnect_note = -1e9
        self.server = None  # the BoundedHTTPServer, while serving

    # ---- called by HTTP threads

    def accept(self, body: bytes, content_type: str) -> Mapped:
        """Decode and map one export; the rows wait for the next flush. Raises :class:`BadBody`."""
        check_body(body, content_type, self.limits.max_items)
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

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def disconnected(self, client, why: str) -> None:
        """A client gone before its request was complete: counted; one line at most every 10 s."""
        with self._lock:
            self.disconnects += 1
            now = time.monotonic()
            if now - self._last_disconnect_note < 10:
                return
            self._last_disconnect_note = now
            n = self.disconnects
        self.warn(f"client {_address(client)} {why} ({n} so far; noted at most every 10 s)")

    def receive(self, rfile, length: int, content_encoding: str | None, content_type: str,
                on_body=lambda: None):
        """Read a body of ``length`` bytes, inflate it and decode it under the budget, and map it.
        Returns the :class:`Mapped` export, or None when the client went away; raises
        :class:`Busy`, :class:`BodyTooLarge` or :class:`BadBody`."""
        budget, wait_s = self.budget, self.limits.busy_wait_s
        held = 0

        def hold(n: int, wait: float = wait_s) -> None:
            nonlocal held
            budget.reserve(n, wait)
            held += n

        try:
            hold(length)
            body = rfile.read(length)
            if len(body) < length:
                return None
            on_body()
            encoding = (content_encoding or "identity").strip().lower()
            with budget.decoding():
                if encoding == "gzip":
                    body = gunzip(body, self.limits.max_body_bytes, on_step=lambda n: hold(n, 0.2))
                elif encoding != "identity":
                    raise BadBody(f"Content-Encoding {printable(encoding, 40)!r} is not supported (use gzip or none)")
                return self.accept(body, content_type)
        finally:
            budget.release(held)

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


def _address(client) -> str:
    try:
        return f"{client[0]}:{client[1]}"
    except (TypeError, IndexError):
        return printable(client, 80)


def make_handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "wattline-otlp"

        timeout = receiver.limits.request_timeout_s  # a socket timeout: no read or write waits longer

        def log_message(self, fmt, *args):  # quiet: exporters post every few seconds
            pass

        def log_error(self, fmt, *args):  # a timed-out or malformed request line: the client's problem
            if "timed out" in fmt:
                receiver.disconnected(self.client_address, "timed out before its request was complete")

        def handle_one_request(self):
            self.server.track(self.connection, "receiving")
            super().handle_one_request()
            self.server.track(self.connection, "receiving")  # idle until its next request

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
            max_body = receiver.limits.max_body_bytes
            if length < 0 or length > max_body:
                self.close_connection = True
                receiver.count("too_large")
                return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {max_body} bytes", reply_type)
            refusal = None
            if self.path.split("?", 1)[0] not in PATHS:
                refusal = (HTTPStatus.NOT_FOUND, f"only {TRACES_PATH} is served (traces)", {})
            elif content_type not in (PROTOBUF, JSON):
                refusal = (HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be {PROTOBUF} or {JSON}", {})
            elif receiver.full():
                refusal = (HTTPStatus.SERVICE_UNAVAILABLE, "buffer full: flushes are failing",
                           {"Retry-After": str(max(1, round(receiver.flush_interval_s)))})
            if refusal:  # the body is not read: the connection closes after the answer
                self.close_connection = True
                return self._error(refusal[0], refusal[1], reply_type, refusal[2])
            try:
                mapped = receiver.receive(self.rfile, length, self.headers.get("Content-Encoding"), content_type,
                                          on_body=lambda: self.server.track(self.connection, "decoding"))
            except Busy as exc:
                self.close_connection = True
                receiver.count("busy")
                return self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc), reply_type, {"Retry-After": "1"})
            except BodyTooLarge as exc:
                receiver.count("too_large")
                return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), reply_type)
            except BadBody as exc:
                receiver.count_bad_body()
                return self._error(HTTPStatus.BAD_REQUEST, str(exc), reply_type)
            if mapped is None:
                self.close_connection = True
                return receiver.disconnected(self.client_address, f"sent {length} bytes' Content-Length, then went away")
            self.server.track(self.connection, "answering")
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


class BoundedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with at most ``max_connections`` connections (threads) at once and
    a deadline on receiving each request.

    Each connection is in one state: ``receiving`` (waiting for or reading a request: a slow
    client's state), ``decoding`` or ``answering``. A reaper shuts down the socket of any
    connection that has been receiving for longer than ``request_timeout_s``. When every
    connection is taken, a new one displaces the one that has been receiving longest (a slow or
    idle client; an exporter reconnects), and gets 503 when none is receiving.
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, receiver: Receiver) -> None:
        super().__init__(address, handler)
        self.receiver = receiver
        self.limits = receiver.limits
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, tuple[str, float]] = {}
        self.peak_connections = 0
        self._stop_reaper = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="otlp-reaper", daemon=True)
        self._reaper.start()

    def track(self, conn, state: str) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns[conn] = (state, time.monotonic())

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self._displace_oldest_receiving()
            if not self._slots.acquire(timeout=0.5):
                self.receiver.count("busy")
                self._refuse(request)
                return
        with self._lock:
            self._conns[request] = ("receiving", time.monotonic())
            self.peak_connections = max(self.peak_connections, len(self._conns))
        threading.Thread(target=self._serve_one, args=(request, client_address), name="otlp-conn", daemon=True).start()

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._lock:
                self._conns.pop(request, None)
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """A client gone mid-request (reset, broken pipe, timeout) is one counted line; anything
        else is one line naming the exception (never a traceback per client)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            self.receiver.disconnected(client_address, f"went away mid-request ({type(exc).__name__})")
        else:
            self.receiver.warn(f"request from {_address(client_address)} failed: {type(exc).__name__}: {exc}")

    def _displace_oldest_receiving(self) -> None:
        with self._lock:
            waiting = [(since, conn) for conn, (state, since) in self._conns.items() if state == "receiving"]
        if waiting:
            _, conn = min(waiting, key=lambda w: w[0])
            _shut(conn)

    def _refuse(self, request) -> None:
        """503 without reading the request: a few bytes the kernel buffers, then close."""
        try:
            request.setblocking(False)
            request.send(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
        except OSError:
            pass
        self.shutdown_request(request)

    def _reap(self) -> None:
        timeout = self.limits.request_timeout_s
        while not self._stop_reaper.wait(min(0.5, timeout / 4)):
            now = time.monotonic()
            with self._lock:
                late = [c for c, (state, since) in self._conns.items() if state == "receiving" and now - since > timeout]
            for conn in late:
                _shut(conn)

    def server_close(self) -> None:
        self._stop_reaper.set()
        super().server_close()


def _shut(conn) -> None:
    """Unblock whoever reads ``conn``: its read returns end-of-file, and its thread ends."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def serve(receiver: Receiver, host: str, port: int, stop: threading.Event,
          ready=lambda address: None) -> None:
    """Serve until ``stop`` is set; then stop accepting, and flush what is pending."""
    server = BoundedHTTPServer((host, port), make_handler(receiver), receiver)
    receiver.server = server
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
