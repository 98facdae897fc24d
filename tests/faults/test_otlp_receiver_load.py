"""`wattline ingest otlp` against hostile clients: gzip bombs, slowloris, undecodable bodies, clients
that go away early, control characters; and the request store's memory against huge request ids.

Each test runs the real receiver as a process on 127.0.0.1 and measures it from /proc (RSS,
threads); every loop is bounded. The receiver runs under a 6 GiB address-space limit and is
killed past 1.5 GB of RSS, so a receiver without bounds fails the test instead of the machine.
"""

from __future__ import annotations

import gzip
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import polars as pl
import pytest
import requests as http
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collectors.requests.store import FRAME_SCHEMA, RequestStore
from tests.otlp_sender import emit, fake_request
from tests.phase_fixtures import endpoint_inventory
from tests.test_otlp_receiver import free_port, stored

REPO = Path(__file__).resolve().parents[2]
PROTO = {"Content-Type": "application/x-protobuf"}
JSONCT = {"Content-Type": "application/json"}
KILL_RSS_MB = 1500


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


class Receiver:
    """A `wattline ingest otlp` process, its RSS and thread count sampled every 20 ms."""

    def __init__(self, data: Path, *args: str, endpoint: tuple[str, ...] = ("--endpoint", "vllm-a")) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from pipeline.cli import main; main()", "ingest", "otlp", "--listen",
             f"127.0.0.1:{self.port}", *endpoint, "--flush-interval-s", "0.3", "--data-dir", str(data), *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_limit_memory)
        self.peak_rss_mb = 0.0
        self.peak_threads = 0
        self.killed = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"receiver exited: {self.proc.communicate()[1]}") from None
                time.sleep(0.1)
        else:
            self.proc.kill()
            raise AssertionError("receiver did not start")
        self.base_rss_mb = self._sample()[0]
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watcher, daemon=True)
        self._watch.start()

    def _sample(self) -> tuple[float, int]:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])

    def _watcher(self) -> None:
        while not self._stop.wait(0.02) and self.proc.poll() is None:
            try:
                rss, threads = self._sample()
            except (OSError, KeyError, ValueError):
                return
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            self.peak_threads = max(self.peak_threads, threads)
            if rss > KILL_RSS_MB:
                self.killed = True
                self.proc.kill()

    def stop(self) -> tuple[str, str]:
        self._stop.set()
        self._watch.join(5)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate(timeout=10)


def good_export(i: int) -> bytes:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm-a"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    emit(provider.get_tracer("t"), fake_request(i))
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def post_like_an_exporter(url: str, body: bytes, headers: dict, deadline_s: float) -> int:
    """POST, retrying 503/429 after Retry-After and connection errors, as OTLP exporters do."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            resp = http.post(url, data=body, headers=headers, timeout=max(0.5, end - time.monotonic()))
        except http.RequestException:
            time.sleep(0.2)
            continue
        if resp.status_code not in (429, 503):
            return resp.status_code
        time.sleep(min(float(resp.headers.get("Retry-After", "1")), max(0.0, end - time.monotonic())))
    return 0


def gzip_bomb(kind: str, size: int) -> bytes:
    """A body of ``size`` bytes when inflated, ~1000 times smaller on the wire: OTLP/JSON or
    protobuf made of empty spans (the most objects per byte)."""
    if kind == "json":
        head, unit, tail = b'{"resourceSpans":[{"scopeSpans":[{"spans":[', b"{},", b"{}]}]}]}"
        count = (size - len(head) - len(tail)) // len(unit)
    else:  # ExportTraceServiceRequest{resource_spans{scope_spans{spans{}, spans{}, ...}}}
        unit, tail = b"\x12\x00", b""
        count = (size - 12) // len(unit)
        n = count * len(unit)
        head = b"\x0a" + _varint5(n + 6) + b"\x12" + _varint5(n)
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts, block = [c.compress(head)], unit * (1 << 19)
    left = count
    while left > 0:
        k = min(left, 1 << 19)
        parts.append(c.compress(block if k == 1 << 19 else unit * k))
        left -= k
    parts += [c.compress(tail), c.flush()]
    return b"".join(parts)


def _varint5(n: int) -> bytes:
    return bytes([(n >> (7 * i)) & 0x7F | (0x80 if i < 4 else 0) for i in range(5)])


def slow_connections(port: int, n: int) -> list[socket.socket]:
    """Slowloris: connections that send half a request head and then nothing."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n")
        except OSError:
            pass
        socks.append(s)
    return socks


@pytest.mark.slow
def test_bombs_and_slowloris_keep_memory_and_threads_bounded_and_a_good_export_lands(tmp_path):
    """6 concurrent gzip bodies of 61 KB inflating to 60 MB (3 OTLP/JSON, 3 protobuf) and 500
    slow connections: RSS stays under 1 GB, threads under 100, and a good export sent meanwhile
    is stored within 5 s."""
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    bombs = [(gzip_bomb("json", 60 << 20), JSONCT)] * 3 + [(gzip_bomb("protobuf", 60 << 20), PROTO)] * 3
    assert all(len(b) < 100_000 for b, _ in bombs), [len(b) for b, _ in bombs]
    rx = Receiver(data)
    socks: list[socket.socket] = []
    statuses: list[int] = []
    try:
        socks = slow_connections(rx.port, 500)

        def bomb(body, headers):
            try:
                resp = http.post(rx.url, data=body, headers={**headers, "Content-Encoding": "gzip"}, timeout=60)
                statuses.append(resp.status_code)
            except http.RequestException as exc:
                statuses.append(type(exc).__name__)

        threads = [threading.Thread(target=bomb, args=b) for b in bombs]
        for t in threads:
            t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        answer = post_like_an_exporter(rx.url, good_export(7), PROTO, 5.0)
        while "cmpl-00007" not in stored(data) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        latency_s = time.monotonic() - t0
        for t in threads:
            t.join(60)
        time.sleep(0.5)
    finally:
        for s in socks:
            s.close()
        out, err = rx.stop()
    print(f"base {rx.base_rss_mb:.0f} MB, peak RSS {rx.peak_rss_mb:.0f} MB, peak threads {rx.peak_threads}, "
          f"good export stored after {latency_s:.2f} s, bomb answers {statuses}")
    assert answer == 200
    assert not rx.killed, f"receiver passed {KILL_RSS_MB} MB"
    assert rx.peak_rss_mb < 1000
    assert rx.peak_threads < 100
    assert latency_s < 5.0
    assert "cmpl-00007" in stored(data)
    assert all(s in (413, 503) for s in statuses), statuses
    assert "Traceback" not in err
    assert rx.proc.returncode == 0, err


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    data = tmp_path_factory.mktemp("rx") / "data"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    rx = Receiver(data, endpoint=("--endpoint-from", "service.name"))
    yield rx, data
    rx.stop()


def rpc_status_message(body: bytes) -> str:
    """google.rpc.Status{code=1, message=2} → message."""
    pos = 2 if body[1] < 0x80 else 3  # the code: one or two bytes
    assert body[pos] == 0x12
    length, shift, pos = 0, 0, pos + 1
    while True:
        b = body[pos]
        pos += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return body[pos:pos + length].decode()


def _deep_protobuf(levels: int) -> bytes:
    def ld(field: int, payload: bytes) -> bytes:
        return bytes([field << 3 | 2]) + _varint(len(payload)) + payload

    value = b"\x18\x01"  # AnyValue{int_value: 1}
    for _ in range(levels):
        value = ld(5, ld(1, value))  # AnyValue{array_value: ArrayValue{values: [value]}}
    span = ld(5, b"llm_request") + ld(9, ld(1, b"k") + ld(2, value))
    return ld(1, ld(2, ld(2, span)))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


UNDECODABLE = {
    "json-nested-100000": (b"[" * 100_000 + b"]" * 100_000, JSONCT, "nested too deep"),
    "json-in-otlp-nested-5000": (b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":'
                                 + b'{"arrayValue":{"values":[' * 5000 + b"{}" + b"]}}" * 5000 + b"}]}}]}",
                                 JSONCT, "nested too deep"),
    "json-integer-100000-digits": (b'{"resourceSpans":[{"resource":{"droppedAttributesCount":'
                                   + b"7" * 100_000 + b"}}]}", JSONCT, "out of range"),  # read whole (never converted), refused by the field's range
    "protobuf-nested-300": (_deep_protobuf(300), PROTO, "OTLP protobuf"),
    "protobuf-truncated": (_deep_protobuf(3)[:-4], PROTO, "OTLP protobuf"),
}


@pytest.mark.parametrize("name", list(UNDECODABLE))
def test_undecodable_body_gets_400_with_one_line(receiver, name):
    rx, _ = receiver
    body, headers, reason = UNDECODABLE[name]
    for encoding in ("identity", "gzip"):
        sent = gzip.compress(body) if encoding == "gzip" else body
        resp = http.post(rx.url, data=sent, headers={**headers, "Content-Encoding": encoding}, timeout=10)
        assert resp.status_code == 400, (name, encoding, resp.status_code)
        message = resp.json()["message"] if headers is JSONCT else rpc_status_message(resp.content)
        assert reason in message and "\n" not in message and len(message) < 600, message
    assert http.post(rx.url, data=good_export(1), headers=PROTO, timeout=10).status_code == 200


def test_body_past_the_item_limit_gets_413_before_decoding(receiver):
    """2.2 MB of empty spans (1.1 million messages; 190 MB once decoded) is refused by counting."""
    rx, _ = receiver
    rss_before = rx.peak_rss_mb
    for kind, headers in (("protobuf", PROTO), ("json", JSONCT)):
        resp = http.post(rx.url, data=gzip_bomb(kind, 2_200_000 if kind == "protobuf" else 3_300_000),
                         headers={**headers, "Content-Encoding": "gzip"}, timeout=30)
        assert resp.status_code == 413, (kind, resp.status_code)
    assert rx.peak_rss_mb < rss_before + 150


def test_clients_that_go_away_early_are_counted_not_traced(tmp_path):
    """200 clients announce 1000 bytes, send 10 and reset the connection: no traceback, a line at
    most every 10 s, the count in the summary; the receiver still serves."""
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    rx = Receiver(data)
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", rx.port), timeout=5)
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                      b"Content-Length: 1000\r\n\r\n0123456789")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
            s.close()
        time.sleep(0.5)
        assert post_like_an_exporter(rx.url, good_export(2), PROTO, 5.0) == 200
    finally:
        out, err = rx.stop()
    assert "Traceback" not in err, err[:2000]
    assert len(err.encode()) < 2000, err[:2000]
    assert "client(s) gone early" in out and "ingested 1 request(s)" in out, out


def test_control_characters_from_clients_are_escaped_on_stderr(tmp_path):
    """An endpoint name carrying a newline and an ANSI escape cannot forge a log line."""
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="vllm-a", gpus=1)
    # allowed, so the receiver stores the spans and warns about the name on stderr (the warning is the printed text)
    rx = Receiver(data, "--allow-unknown-endpoint", endpoint=("--endpoint-from", "service.name"))
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "x\x1b[31m\nerror: forged"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    emit(provider.get_tracer("t"), fake_request(3))
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    try:
        assert http.post(rx.url, data=body, headers=PROTO, timeout=10).status_code == 200
        time.sleep(1.0)  # a flush: the unknown-endpoint warning
    finally:
        out, err = rx.stop()
    assert "\x1b" not in err + out and "\nerror: forged" not in err + out
    assert "x\\x1b[31m\\x0aerror: forged" in err, err


def test_store_cache_is_bounded_by_bytes_not_rows(tmp_path):
    """15 requests with 2 MB request ids cost the cache 24 bytes each, not their ids; with a small
    cap, days are dropped and read again, and repeats are still found."""
    def batch(day_offset: int, ids: list[str]) -> pl.DataFrame:
        t = 1_795_996_800 * 10**9 + day_offset * 86_400 * 10**9
        rows = [{"request_id": rid, "endpoint": "e", "arrival_ts": t + i, "prefill_start_ts": None,
                 "first_token_ts": t + i + 10, "end_ts": t + i + 20, "prompt_tokens": 1, "output_tokens": 1,
                 "status": "ok", "_src": "s", "_line": i, "_raw": None} for i, rid in enumerate(ids)]
        return pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row")

    huge = [chr(65 + i) * (2 << 20) for i in range(15)]
    store = RequestStore(tmp_path / "data", prefix="t")
    for rid in huge:
        assert store.add(batch(0, [rid])).written == 1
    cached = sum(df.estimated_size() for df in store._days.values())
    assert cached < 15 * 64, cached
    store = RequestStore(tmp_path / "data2", prefix="t", max_cache_bytes=100)
    for day in range(3):
        assert store.add(batch(-day, [f"r{day}-{i}" for i in range(10)])).written == 10
        assert sum(df.estimated_size() for df in store._days.values()) <= 10 * 24 + 100
    again = store.add(pl.concat([batch(0, [f"r0-{i}" for i in range(10)])[1:2], batch(0, ["new"])]))
    assert (again.written, again.duplicates, again.conflicts) == (1, 1, [])
    changed = batch(-2, [f"r2-{i}" for i in range(10)])[3:4].with_columns(output_tokens=pl.lit(9, pl.Int32))
    assert len(store.add(changed).conflicts) == 1
