"""The fourth assignment source: dcgm-exporter's Kubernetes pod labels, read by `wattline import
prometheus` from a real Prometheus that scraped a dcgm-exporter-format endpoint on 127.0.0.1.
infer-0's GPU 0 is held by pod chat-small-… (endpoint ep-a by the inventory's `kubernetes:` rules)
until 12:00 and by chat-big-… (ep-b) after; GPU 1 by a notebook pod no rule maps.

Prometheus stores a scraped sample only near "now"; the exporter stamps each sample with its own
time on the test's day (one 10 s step per scrape) and the server accepts that day's samples through
its out-of-order window. It keeps answering for the old pod's series for its lookback (5 min) after
the new pod's first sample, as a backfilled history does."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.runner import run_day
from tests.builders import DAY
from tests.cli_util import invoke, one_line_error
from tests.test_assignments import ASSETS, NOON_NS, START_NS, UUID, _check_split, _inventory, _power, _power_day
from tests.test_prometheus_import import PROMETHEUS, free_port

STEP_S, STEPS = 10, 120  # one sample every 10 s from 11:50:00 to 12:09:50
POD_A, POD_B, NOTEBOOK = "chat-small-6d9f7c-x2k4p", "chat-big-55b8d9-q7r2m", "notebook-0"
RULES = {"rules": [{"match": {"namespace": "serving", "pod": "chat-small-*"}, "endpoint": "ep-a"},
                   {"match": {"pod": "chat-big-*"}, "endpoint": "ep-b"}]}

pytestmark = pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason=f"{PROMETHEUS} is missing: apt-get install -y prometheus")


class PodExporter:
    """dcgm-exporter's /metrics with its Kubernetes labels: scrape k serves the sample at 11:50:00 + 10 k s."""

    def __init__(self, host: str = "infer-0", gpu: int = 0) -> None:
        t, w = _power()
        self.host, self.gpu = host, gpu  # the labels of the GPU whose UUID is UUID
        self.t_ms = START_NS // 10**6 + np.arange(STEPS) * STEP_S * 1000
        self.w = np.interp(self.t_ms * 10**6, t, w)
        self.k = 0
        self.lock = threading.Lock()

    def body(self) -> bytes:
        with self.lock:
            k = min(self.k, STEPS - 1)
            self.k += 1
        t = int(self.t_ms[k])
        pod = POD_A if t * 10**6 < NOON_NS else POD_B
        common = f'modelName="NVIDIA H100 80GB HBM3",Hostname="{self.host}",DCGM_FI_DRIVER_VERSION="580.159.04"'
        lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
                 f'DCGM_FI_DEV_POWER_USAGE{{gpu="{self.gpu}",UUID="{UUID}",device="nvidia{self.gpu}",{common},container="vllm",'
                 f'namespace="serving",pod="{pod}"}} {self.w[k]:.3f} {t}',
                 f'DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="GPU-1",device="nvidia1",{common},container="lab",'
                 f'namespace="research",pod="{NOTEBOOK}"}} 90.000 {t}']
        return ("\n".join(lines) + "\n").encode()

    def serve(self, port: int) -> ThreadingHTTPServer:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                body = exporter.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus on 127.0.0.1 that scraped the whole 20 minutes; yields its URL."""
    yield from scraped(tmp_path_factory.mktemp("prom"), PodExporter())


def scraped(tmp, exporter: PodExporter):
    """Runs a real Prometheus on 127.0.0.1 until it has scraped all of ``exporter``; yields its URL."""
    exp_port, prom_port = free_port(), free_port()
    server = exporter.serve(exp_port)
    window_d = (dt.datetime.now(dt.UTC).date() - DAY).days + 2  # the test's day is in the past
    (tmp / "prometheus.yml").write_text(
        f"storage:\n  tsdb:\n    out_of_order_time_window: {window_d}d\n"
        "global:\n  scrape_interval: 50ms\n  scrape_timeout: 40ms\n"
        "scrape_configs:\n  - job_name: dcgm\n    honor_timestamps: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exp_port}']\n")
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while exporter.k < STEPS + 5 and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            time.sleep(0.2)
        assert exporter.k >= STEPS + 5, f"only {exporter.k} scrapes in 60 s"
        time.sleep(0.3)
        yield f"http://127.0.0.1:{prom_port}"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        server.shutdown()


def _import(url, d, *extra):
    return invoke("import", "prometheus", "--url", url, "--start", str(START_NS // 10**9),
                  "--end", str(START_NS // 10**9 + STEPS * STEP_S - 1), "--data-dir", str(d), *extra)


def _held(d):
    rows = [r for f in sorted((d / "assignments").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted((r["source"], r["host"], r["gpu"], r["gpu_uuid"], r["name"], r["from_ts"], r["to_ts"]) for r in rows)


def test_pod_labels_split_the_gpu_at_noon(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d, kubernetes=RULES)
    t, w = _power_day(d)  # the 10 Hz samples of the other sources' tests: the power the split is checked on
    out = _import(prometheus, d)
    assert out.exit_code == 0, out.output
    assert "pod labels: 2 assignment run(s) of 1 GPU(s) stored" in out.output
    assert f"pods no kubernetes rule maps (steps held by none): research/{NOTEBOOK} (1200)" in out.output
    at = lambda ns: dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)  # noqa: E731
    end = START_NS + STEPS * STEP_S * 10**9
    # the old pod's series still answers for 5 min after noon: the newer one holds the GPU
    assert _held(d) == [("prometheus", "infer-0", 0, UUID, "ep-a", at(START_NS), at(NOON_NS)),
                        ("prometheus", "infer-0", 0, UUID, "ep-b", at(NOON_NS), at(end))]
    result = run_day(d, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert result.success, result.error
    _check_split(d, t, w)
    # GPU 1 draws power all along with no endpoint holding it: a WARN naming it and its hours
    failed = {c.check: c for c in result.failed_checks}
    assert failed["gpus_held"].severity == "WARN"
    assert "1 GPU(s) draw power" in failed["gpus_held"].description
    assert "infer-0/1 in hour(s) 11, 12 UTC" in failed["gpus_held"].description
    # importing the same range again replaces its assignments (no conflict with itself, no second copy)
    assert _import(prometheus, d).exit_code == 0
    assert len(_held(d)) == 2


def test_prometheus_and_a_file_that_disagree_are_one_error_naming_both(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d, kubernetes=RULES)
    assert _import(prometheus, d).exit_code == 0
    noon = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC).isoformat()
    f = tmp_path / "held.csv"
    f.write_text(f"gpu_uuid,kind,name,from_ts\n{UUID},endpoint,ep-a,{noon}\n")
    one_line_error(invoke("import", "assignments", str(f), "--data-dir", str(d)),
                   "assignments disagree, nothing written", "prometheus gives GPU 0 of host 'infer-0' to endpoint 'ep-b'",
                   "file gives GPU 0 of host 'infer-0' to endpoint 'ep-a'")
    assert [r[0] for r in _held(d)] == ["prometheus", "prometheus"]
    # the other way round: the file first, then the import refuses and writes neither power nor assignments
    e = tmp_path / "other"
    _inventory(e, kubernetes=RULES)
    assert invoke("import", "assignments", str(f), "--data-dir", str(e)).exit_code == 0
    one_line_error(_import(prometheus, e), "assignments disagree, nothing written", "prometheus gives", "file gives")
    assert not (e / "power").exists() and [r[0] for r in _held(e)] == ["file"]


def test_without_kubernetes_rules_the_import_writes_no_assignments(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d)
    out = _import(prometheus, d)
    assert out.exit_code == 0, out.output
    assert "pod labels" not in out.output and not (d / "assignments").exists()


def test_each_step_goes_to_the_series_that_began_last_and_a_pod_may_come_back(tmp_path):
    """A answers 0–9 s, B 5–14 s (A's lookback overlaps it), A again 16–20 s after a gap: ep-a
    until B's first step, ep-b until its last step + 1 s, nobody for 1 s, then ep-a again."""
    from collectors.inventory import load_inventory
    from collectors.prometheus import ImportResult, Series, assignment_rows

    _inventory(tmp_path, kubernetes=RULES)
    inv = load_inventory(tmp_path / "inventory.yaml")
    res = ImportResult(step_s=1.0)
    s = res.gpus[("infer-0", 0)] = Series("infer-0", 0)
    labels = ("pod", "namespace", "container")
    for pod, lo, hi in ((POD_A, 0, 9), (POD_B, 5, 14), (POD_A, 16, 20)):
        sid = res.series_id({"__name__": "DCGM_FI_DEV_POWER_USAGE", "pod": pod, "namespace": "serving"}, labels)
        t = np.arange(lo, hi + 1, dtype=np.int64) * 1000
        s.t_ms.append(t)
        s.power_avg_w.append(np.full(len(t), 100.0 + sid))
        s.power_sid.append(np.full(len(t), sid))
        s.hold_t_ms.append(t)
        s.hold_sid.append(np.full(len(t), sid))
    s.finish(1.0)
    rows, unmatched = assignment_rows(res, inv)
    sec = lambda r: (r["name"], r["from_ts"].timestamp(), r["to_ts"].timestamp())  # noqa: E731
    assert [sec(r) for r in rows] == [("ep-a", 0, 5), ("ep-b", 5, 15), ("ep-a", 16, 21)]
    assert rows[0]["host"] == "infer-0" and rows[0]["gpu"] == 0 and rows[0]["gpu_uuid"] is None  # no UUID label
    assert not unmatched
    # the power rows follow the same rule: B's values from 5 s, A's again from 16 s
    assert s.power_avg_w.tolist() == [100.0] * 5 + [101.0] * 10 + [100.0] * 5
