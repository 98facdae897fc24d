"""Helpers for the live-metrics tests: free ports, scraping the collector's endpoint, a webhook receiver,
a real Prometheus server, and the known answer of a scripted signal's window."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.fake_pynvml import SLOT_US, signal_w

PROMETHEUS = Path("/usr/bin/prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    """{(metric name, frozenset(labels)): value} from the endpoint's text exposition."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset((k, v) for k, v in s.labels.items() if v != ""))] = s.value
    return out


def pick(samples: dict, name: str, **labels) -> float | None:
    want = {(k, str(v)) for k, v in labels.items()}
    found = [v for (n, lab), v in samples.items() if n == name and want <= lab]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def wait_for_endpoint(port: int, proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        try:
            if pick(scrape(port), "wattline_gpu_last_sample_timestamp_seconds", gpu=0) is not None:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("the metrics endpoint never served a sample")


def grid_window(sig: dict, anchor_us: int, window_s: float) -> list[float]:
    """The signal's buffer samples in (anchor − W, anchor]: the known answer of a window."""
    off = int(sig.get("grid_offset_us", 0))
    lo = anchor_us - int(window_s * 1e6)
    k0 = (lo - off) // SLOT_US + 1
    return [signal_w(sig, t) for t in range(k0 * SLOT_US + off, anchor_us + 1, SLOT_US)]


def host_window(sigs: dict, anchor_us: int, window_s: float) -> list[float]:
    """The host's 20 ms slot sums in (anchor − W, anchor]: each GPU's latest grid sample ≤ slot end."""
    out = []
    for k in range((anchor_us - int(window_s * 1e6)) // SLOT_US + 1, anchor_us // SLOT_US + 1):
        end = k * SLOT_US
        total = 0.0
        for sig in sigs.values():
            off = int(sig.get("grid_offset_us", 0))
            total += signal_w(sig, (end - off) // SLOT_US * SLOT_US + off)
        out.append(total)
    return out


class Webhook:
    """A local HTTP server that records each JSON POST with its receipt time (wall clock)."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def need_prometheus() -> None:
    if PROMETHEUS.exists():
        return
    if os.environ.get("CI"):
        pytest.fail("/usr/bin/prometheus is missing on CI: apt-get install -y prometheus")
    pytest.skip("/usr/bin/prometheus not installed (Debian package `prometheus`); CI installs it")


class PrometheusServer:
    """A real Prometheus on 127.0.0.1 with a temp config and storage, scraping one target."""

    def __init__(self, tmp: Path, target_port: int, interval: str = "1s", rule_file: Path | None = None):
        need_prometheus()
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        rules = f"rule_files: ['{rule_file}']\n" if rule_file else ""
        cfg.write_text(f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n{rules}"
                       f"scrape_configs:\n  - job_name: wattline\n    static_configs:\n"
                       f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            assert self.proc.poll() is None, (tmp / "prometheus.log").read_text()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("prometheus did not become ready")

    def query(self, promql: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
