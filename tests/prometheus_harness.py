"""A real Prometheus (Debian's ``prometheus`` package) on 127.0.0.1 scraping a test exporter that
serves dcgm-exporter's text format, each sample stamped with its own time, so a fast scrape
(every 50 ms) records a long series in a few seconds of wall time. Used by the import tests
(tests/test_prometheus_import.py, test_prometheus_limit.py) and the pod-label assignment tests
(tests/test_assignments_prometheus.py, test_gpu_uuid_places.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROMETHEUS = "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScrapedExporter:
    """A /metrics endpoint whose ``body()`` is the text of the next scrape; ``k`` counts the scrapes."""

    k = 0
    lock: threading.Lock

    def body(self) -> bytes:
        raise NotImplementedError

    def missed(self) -> None:
        """The scrape just served never reached Prometheus: serve its sample again next time."""
        with self.lock:
            self.k -= 1

    def serve(self, port: int) -> ThreadingHTTPServer:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                body = exporter.body()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except ConnectionError:
                    # Prometheus hung up after its 40 ms scrape timeout (a busy machine): a missed
                    # scrape, not an error (printed, the traceback lands in a CLI test's output),
                    # and its sample is served again so the stored series has no hole.
                    exporter.missed()

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@contextmanager
def running_prometheus(tmp: Path, exporter: ScrapedExporter, scrapes: int, *, out_of_order_days: int | None = None) -> Iterator[str]:
    """Prometheus scraping ``exporter`` until it has served ``scrapes`` (plus 5, so the last sample
    is surely stored); yields its URL. ``out_of_order_days`` lets it accept samples stamped that
    many days before now (a past test day), which it otherwise drops as too old."""
    exp_port, prom_port = free_port(), free_port()
    server = exporter.serve(exp_port)
    storage = f"storage:\n  tsdb:\n    out_of_order_time_window: {out_of_order_days}d\n" if out_of_order_days else ""
    (tmp / "prometheus.yml").write_text(
        f"{storage}global:\n  scrape_interval: 50ms\n  scrape_timeout: 40ms\n"
        "scrape_configs:\n  - job_name: dcgm\n    honor_timestamps: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exp_port}']\n")
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while exporter.k < scrapes + 5 and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            time.sleep(0.2)
        assert exporter.k >= scrapes + 5, f"only {exporter.k} scrapes in 60 s"
        time.sleep(0.3)
        yield f"http://127.0.0.1:{prom_port}"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        server.shutdown()
        shutil.rmtree(tmp / "tsdb", ignore_errors=True)
