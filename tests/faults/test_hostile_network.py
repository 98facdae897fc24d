"""Hostile peers on the network: a Prometheus server that answers out of range, with bad JSON, with
redirects or one byte at a time; clients that hold the metrics endpoint; a webhook that trickles;
alert rules that would fail later. Every server is real, on 127.0.0.1, and stops by itself."""

from __future__ import annotations

import datetime as dt
import json
import logging
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from collectors.nvml.alerts import AlertsError, Webhook, WebhookNotifier, load_alerts
from collectors.nvml.metrics import READ_DEADLINE_S, LiveMetrics, serve, stop
from collectors.prometheus import PrometheusError, fetch
from tests.cli_util import invoke, one_line_error
from tests.fakes.fake_pynvml import configure
from tests.nvml_helpers import FAKE

WATTLINE = Path(sys.executable).with_name("wattline")
DAY = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=20)
T0 = dt.datetime(DAY.year, DAY.month, DAY.day, 1, tzinfo=dt.UTC).timestamp()  # 01:00 UTC of a day the pipeline runs
LABELS = {"__name__": "DCGM_FI_DEV_POWER_USAGE", "Hostname": "h1", "gpu": "0", "modelName": "NVIDIA H200"}
CONTROL = [chr(c) for c in range(32)] + ["\x7f"]


def _form(handler) -> dict:
    body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
    return dict(urllib.parse.parse_qsl(body.decode()))


def good_answer(path: str, form: dict) -> dict:
    """What a healthy server answers: GPU 0 of h1 at 300 W on every asked step; no energy counter."""
    if path.endswith("/query_range") and form.get("query") == "DCGM_FI_DEV_POWER_USAGE":
        a, b, step = float(form["start"]), float(form["end"]), float(form["step"])
        n = int(round((b - a) / step)) + 1
        return {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": LABELS, "values": [[a + k * step, "300"] for k in range(n)]}]}}
    return {"status": "success", "data": {"resultType": "matrix", "result": []}}


class Server:
    """A threaded HTTP server on 127.0.0.1: ``handle(handler, path, form)`` answers each POST/GET
    (returning a dict sends it as JSON with 200); every request is recorded."""

    def __init__(self, handle=None):
        self.requests: list[tuple[str, str, dict]] = []
        outer = self
        handle = handle or (lambda h, path, form: good_answer(path, form))

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                form = _form(self) if self.command == "POST" else {}
                outer.requests.append((self.command, self.path, form))
                out = handle(self, urllib.parse.urlsplit(self.path).path, form)
                if isinstance(out, dict | list):
                    body = json.dumps(out).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            do_GET = do_POST = _any

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server_factory():
    made = []

    def make(handle=None):
        made.append(Server(handle))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _import(url, data_dir, *args, start=T0, end=T0 + 60):
    return invoke("import", "prometheus", "--url", url, "--start", str(start), "--end", str(end),
                  "--data-dir", str(data_dir), *args)


def _days(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "power").glob("date=*"))


def _rows(data_dir: Path) -> int:
    return pads.dataset(data_dir / "power", partitioning="hive").count_rows() if (data_dir / "power").exists() else 0


# -- import prometheus: the range -------------------------------------------------------------------------
def test_an_end_in_milliseconds_is_one_line_before_any_query(server_factory, tmp_path):
    """--end in ms (1.7e12 s, year ~55 000): one line naming the span and the likely mistake, at once,
    no query sent (was: 1.6e8 chunks planned in a list, MemoryError). Run with a 2 GiB address space."""
    srv = server_factory()
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
    t = time.monotonic()
    r = subprocess.run([str(WATTLINE), "import", "prometheus", "--url", srv.url, "--start", str(T0),
                        "--end", str(int(T0 * 1000)), "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "over 31 days" in lines[0], r.stderr[-2000:]
    assert "--end in milliseconds?" in lines[0] and "--allow-long-range" in lines[0]
    assert time.monotonic() - t < 30 and srv.requests == [] and _days(tmp_path) == []


def test_a_long_range_when_allowed_is_cut_to_the_pipelines_days(server_factory, tmp_path):
    """--allow-long-range with the same --end in ms: queried only up to the last day the pipeline
    accepts (a few chunks at a 1 h step), said in the summary (was: 43 000 chunks sent)."""
    srv = server_factory(lambda h, path, form: good_answer(path, form) if len(srv.requests) < 60 else
                         {"status": "error", "errorType": "test", "error": "too many queries"})
    r = _import(srv.url, tmp_path, "--step", "1h", "--allow-long-range", end=int(T0 * 1000))
    assert r.exit_code == 0, r.output
    ends = [float(f["end"]) for _, p, f in srv.requests if p.endswith("/query_range")]
    tomorrow_end = dt.datetime.combine(dt.datetime.now(dt.UTC).date() + dt.timedelta(days=2), dt.time(),
                                       dt.UTC).timestamp()
    assert len(ends) <= 4 and max(ends) < tomorrow_end
    assert "queried" in r.output and "outside the days the pipeline can run" in r.output
    assert _days(tmp_path)[0] == f"date={DAY.isoformat()}"


def test_a_range_before_the_pipelines_days_is_one_line(server_factory, tmp_path):
    """--start 0 --end 60 (1970): one line with the range, nothing queried or written (was:
    date=1970-01-01 written, a day `run` refuses)."""
    srv = server_factory(lambda h, path, form: good_answer(path, form))
    one_line_error(_import(srv.url, tmp_path, start=0, end=60), "outside the days the pipeline can run", "2020-01-01")
    assert srv.requests == [] and _days(tmp_path) == []


def test_a_range_over_31_days_needs_the_flag(server_factory, tmp_path):
    srv = server_factory()
    one_line_error(_import(srv.url, tmp_path, end=T0 + 32 * 86400), "over 31 days", "--allow-long-range")
    assert srv.requests == []


# -- import prometheus: what the server answers -------------------------------------------------------------
@pytest.mark.slow  # a 10⁶-point JSON answer built, served and parsed
def test_points_outside_the_asked_range_are_dropped_and_counted(server_factory, tmp_path):
    """A 60 s query answered with 10⁶ points at 1 s (11.6 days): the 61 asked for are imported, the
    rest counted in the summary (was: all imported, across 13 days)."""
    n = 1_000_000
    power = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": LABELS, "values": [[T0 + k, "250"] for k in range(n)]}]}}).encode()

    def handle(h, path, form):
        if path.endswith("/query_range") and form.get("query") == "DCGM_FI_DEV_POWER_USAGE":
            h.send_response(200)
            h.send_header("Content-Length", str(len(power)))
            h.end_headers()
            h.wfile.write(power)
            return None
        return good_answer(path, {**form, "query": "other"})

    srv = server_factory(handle)
    r = _import(srv.url, tmp_path)
    assert r.exit_code == 0, r.output
    assert _days(tmp_path) == [f"date={DAY.isoformat()}"] and _rows(tmp_path) == 61
    assert "imported 61 power row(s)" in r.output
    assert f"points outside the asked range: {n - 61}" in r.output


def test_timestamps_beyond_int64_nanoseconds_are_dropped_not_wrapped(server_factory, tmp_path):
    """Points dated 2300 (wraps int64 ns into 1715), 1e300 s and -1e12 s among the asked ones:
    dropped and counted, never written to a wrong day (was: date=1715-06-13)."""
    bad = [[dt.datetime(2300, 1, 1, tzinfo=dt.UTC).timestamp(), "200"], [1e300, "200"], [-1e12, "200"]]

    def handle(h, path, form):
        ans = good_answer(path, form)
        if ans["data"]["result"]:
            ans["data"]["result"][0]["values"][5:5] = bad
        return ans

    srv = server_factory(handle)
    r = _import(srv.url, tmp_path)
    assert r.exit_code == 0, r.output
    assert _days(tmp_path) == [f"date={DAY.isoformat()}"] and _rows(tmp_path) == 61
    assert "points outside the pipeline's days: 3" in r.output


@pytest.mark.parametrize("code", [301, 302, 303])
def test_a_redirect_elsewhere_is_one_line_and_not_followed(server_factory, tmp_path, code):
    """A redirect to another port (was: followed, the POST turned into a GET there, imported)."""
    other = server_factory()
    srv = server_factory(lambda h, path, form: _redirect(h, code, f"{other.url}{h.path}"))
    one_line_error(_import(srv.url, tmp_path), f"HTTP {code} redirect to {other.url}", "not followed")
    assert other.requests == [] and _days(tmp_path) == []


def test_a_redirect_to_ftp_is_one_line(server_factory, tmp_path):
    """A redirect to ftp:// (was: followed by urllib's FTP handler)."""
    srv = server_factory(lambda h, path, form: _redirect(h, 302, "ftp://127.0.0.1:1/x"))
    one_line_error(_import(srv.url, tmp_path), "redirect to ftp://127.0.0.1:1/x", "not followed")


def _redirect(h, code, where):
    h.send_response(code)
    h.send_header("Location", where)
    h.send_header("Content-Length", "0")
    h.end_headers()


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickled_answer_ends_at_the_total_deadline(server_factory, part):
    """An answer sent one byte every 0.2 s (its headers, or its body) for up to 20 s: the import stops
    at its total timeout (2 s here) with one error (was: each byte restarted the per-read timeout)."""
    stop = threading.Event()

    def handle(h, path, form):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        if part == "body":
            h.wfile.write(head)
            h.wfile.flush()
        data = head if part == "headers" else b'{"status": "success", ' + b" " * 100000
        for byte in data[:100]:
            if stop.wait(0.2):
                break
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
        h.close_connection = True

    srv = server_factory(handle)
    outcome: list = []

    def run():
        try:
            fetch(srv.url, T0, T0 + 60, timeout_s=2.0)
            outcome.append("returned")
        except PrometheusError as exc:
            outcome.append(exc)

    t = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(10)
    took = time.monotonic() - t
    stop.set()
    assert outcome, "still waiting for the trickled answer after 10 s"
    assert isinstance(outcome[0], PrometheusError) and "did not answer" in str(outcome[0]) and "within 2 s" in str(outcome[0])
    assert took < 4.0, took


@pytest.mark.parametrize("answer,fragment", [
    ({"status": "success"}, "has no 'data'"),
    ({"status": "success", "data": {"result": "x"}}, "has no list 'data.result'"),
    ({"status": "success", "data": ["x"]}, "has no list 'data.result'"),
    (["success"], "not a JSON object"),
])
def test_an_answer_without_its_structure_is_one_line(server_factory, tmp_path, answer, fragment):
    """(was: KeyError / AttributeError / TypeError tracebacks)"""
    srv = server_factory(lambda h, path, form: answer)
    one_line_error(_import(srv.url, tmp_path), fragment)
    assert _days(tmp_path) == []


def test_bad_series_and_points_are_dropped_and_counted_the_rest_imported(server_factory, tmp_path):
    """One GPU's series answered with string values in 3 points, a point that is no pair, a series
    without 'values', one whose 'metric' is a list and one with a numeric label value: those
    points and series dropped and counted, every good point imported (was: ValueError or
    KeyError traceback, nothing imported)."""

    def handle(h, path, form):
        ans = good_answer(path, form)
        res = ans["data"]["result"]
        if res:
            vals = res[0]["values"]
            vals[1][1], vals[2][1], vals[3][1] = "abc", None, {"x": 1}
            vals.insert(4, [T0 + 4])
            res += [{"metric": {**LABELS, "gpu": "1"}}, {"metric": ["x"], "values": []},
                    {"metric": {**LABELS, "gpu": 2}, "values": vals}, "not a series"]
        return ans

    srv = server_factory(handle)
    r = _import(srv.url, tmp_path)
    assert r.exit_code == 0, r.output
    assert _rows(tmp_path) == 58  # 61 asked steps less the 3 bad values
    assert "points that are not [time, number]: 4" in r.output
    assert "malformed series (no 'metric' object or 'values' list): 4" in r.output


def test_a_servers_error_text_is_escaped(server_factory, tmp_path):
    """The server's error text with an escape sequence and a carriage return: printed escaped, in
    the exception's own message too (was: raw in the message; the CLI escaped it at print)."""
    srv = server_factory(lambda h, path, form: {"status": "error", "errorType": "bad_data",
                                                "error": "x\x1b[2J\rerror: forged\nline"})
    with pytest.raises(PrometheusError) as err:
        fetch(srv.url, T0, T0 + 60, timeout_s=5)
    assert not any(c in str(err.value) for c in CONTROL) and "\\x1b[2J\\x0derror: forged\\x0aline" in str(err.value)
    one_line_error(_import(srv.url, tmp_path), "bad_data", "\\x1b[2J")


# -- the metrics endpoint ----------------------------------------------------------------------------------
@pytest.fixture
def endpoint():
    live = LiveMetrics("h1", [0])
    server, thread = serve(live, "127.0.0.1", 0)
    yield server.server_address[1]
    stop(server, thread)


def _timed_scrape(port: int) -> float:
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 200 OK") and b"wattline_host_gpus" in data, data[:200]
    return time.monotonic() - t


def test_slow_and_idle_clients_never_delay_a_scrape(endpoint):
    """One client sending a header byte every second, five idle connections and 100 more: three
    scrapes in a row each answered within 1 s (was: each waited behind the others, 5 s per idle
    connection, forever behind the slow one)."""
    port = endpoint
    stop_slow = threading.Event()
    slow = socket.create_connection(("127.0.0.1", port))

    def trickle():
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
            if stop_slow.wait(1.0):
                return
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(105)]
    try:
        time.sleep(1.5)
        took = [_timed_scrape(port) for _ in range(3)]
        assert max(took) < 1.0, took
    finally:
        stop_slow.set()
        for s in [slow, *idle]:
            s.close()


def test_a_client_that_trickles_its_request_is_closed_at_the_read_deadline(endpoint):
    """A byte every 0.5 s resets no deadline: the endpoint closes the connection READ_DEADLINE_S
    after it opened (was: served it forever, one byte at a time)."""
    s = socket.create_connection(("127.0.0.1", endpoint))
    t = time.monotonic()
    closed_after = None
    try:
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 40:
            s.sendall(bytes([byte]))
            s.settimeout(0.5)
            try:
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - t
                    break
            except TimeoutError:
                pass
    except (BrokenPipeError, ConnectionResetError):
        closed_after = time.monotonic() - t
    finally:
        s.close()
    assert closed_after is not None and READ_DEADLINE_S - 0.5 <= closed_after <= READ_DEADLINE_S + 2, closed_after


# -- alert webhooks ---------------------------------------------------------------------------------------
def _trickling_webhook(server_factory, stop: threading.Event):
    def handle(h, path, form):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(100):
            if stop.wait(0.2):
                break
            h.wfile.write(b"x")
            h.wfile.flush()
        h.close_connection = True

    return server_factory(handle)


def test_a_trickling_webhook_is_cut_at_its_timeout(server_factory):
    """A webhook answering one byte every 0.2 s: each attempt ends at timeout_s (1 s) in all and is
    counted failed; the three events are done within ~3 s (was: the first held delivery forever)."""
    stop = threading.Event()
    hook = _trickling_webhook(server_factory, stop)
    n = WebhookNotifier(Webhook(url=f"{hook.url}/hook", timeout_s=1, retries=0))
    n.start()
    try:
        for i in range(3):
            n.submit({"i": i})
        end = time.monotonic() + 8
        while n.counts["failed"] < 3 and time.monotonic() < end:
            time.sleep(0.05)
        assert n.counts["failed"] == 3 and n.counts["sent"] == 0, n.counts
    finally:
        stop.set()
        n.stop(0)


def test_dropped_alert_events_are_logged_and_counted(server_factory, caplog):
    """A slow webhook and a queue of 5: 150 events → every event is sent, failed or dropped (books
    balance, those still queued at stop included) and the drops are logged (was: 147 dropped, no
    log line)."""
    stop = threading.Event()
    hook = _trickling_webhook(server_factory, stop)
    n = WebhookNotifier(Webhook(url=f"{hook.url}/hook", timeout_s=1, retries=0, queue_size=5))
    n.start()
    caplog.set_level(logging.ERROR, logger="wattline.collect")
    try:
        for i in range(150):
            n.submit({"i": i})
        n.stop(0)
        n.thread.join(3)
        assert not n.thread.is_alive()
        c = n.counts
        assert c["sent"] + c["failed"] + c["dropped"] == 150 and c["dropped"] >= 140, c
        drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
        assert drops and "queue full" in drops[0] and any("still queued at stop" in m for m in drops), drops
    finally:
        stop.set()


def test_webhook_error_text_in_the_log_is_escaped(server_factory, caplog):
    """An HTTP reason phrase with an escape sequence and a carriage return: escaped in the log line."""

    def handle(h, path, form):
        h.wfile.write(b"HTTP/1.1 500 bad\x1b[2J\rforged\r\nContent-Length: 0\r\n\r\n")

    hook = server_factory(handle)
    n = WebhookNotifier(Webhook(url=f"{hook.url}/hook", timeout_s=1, retries=0))
    caplog.set_level(logging.ERROR, logger="wattline.collect")
    n.start()
    n.submit({"i": 0})
    end = time.monotonic() + 5
    while n.counts["failed"] < 1 and time.monotonic() < end:
        time.sleep(0.05)
    n.stop(0)
    msgs = [r.getMessage() for r in caplog.records if "failed after" in r.getMessage()]
    assert msgs and "bad\\x1b[2J\\x0dforged" in msgs[0] and not any(c in msgs[0] for c in CONTROL), msgs


RULE = "rules: [{name: a, level: gpu, quantity: power_w, threshold: 1%s}]"


@pytest.mark.parametrize("url,fragment", [
    ("http://[::1/x", "Invalid IPv6 URL"),
    ("http://127.0.0.1:99999/x", "out of range"),
    ("http://127.0.0.1:abc/x", "Port could not be cast"),
    ("http:///x", "no host"),
])
def test_a_webhook_url_that_cannot_be_used_is_one_line_at_load(tmp_path, url, fragment):
    """(was: accepted by the pattern, then ValueError at `collect` start, traceback)"""
    f = tmp_path / "alerts.yaml"
    f.write_text(f"webhook: {{url: '{url}'}}\n" + RULE % "")
    with pytest.raises(AlertsError, match="webhook.url"):
        load_alerts(f)
    configure(gpus=1)
    one_line_error(invoke("collect", "--alerts", str(f), "--data-dir", str(tmp_path / "d"), "--nvml-module", FAKE,
                          "--duration-seconds", "1"), "webhook.url", fragment)
    one_line_error(invoke("alert-rules", "--alerts", str(f)), "webhook.url", fragment)


@pytest.mark.parametrize("name", ["bad-name", "__reserved", "1abc", "a b", "é"])
def test_alert_rule_label_names_follow_prometheus(tmp_path, name):
    """(was: accepted, then a rules file Prometheus refuses)"""
    f = tmp_path / "alerts.yaml"
    f.write_text(RULE % f", labels: {{{json.dumps(name)}: page}}")
    one_line_error(invoke("alert-rules", "--alerts", str(f)), "labels", "not a Prometheus label name")


def test_good_label_names_still_load(tmp_path):
    f = tmp_path / "alerts.yaml"
    f.write_text(RULE % ", labels: {severity: page, _team: gpu, Team2: x}")
    assert load_alerts(f).rules[0].labels == {"severity": "page", "_team": "gpu", "Team2": "x"}
