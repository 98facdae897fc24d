"""The noon-split GPU the assignment tests share: infer-0's GPU 0 draws a ramp and a wave for 20 min
around 12:00 and changes hands at noon (endpoint ep-a, then ep-b; job-a, then job-b), one request a
minute on each endpoint in its own half. Each assignment source (the inventory's timed assignments,
a site's file, job_events, dcgm-exporter's pod labels through a real Prometheus) tells the split its
own way: tests/test_assignments*.py, test_assignment_tables.py, test_gpu_uuid_places.py."""

import datetime as dt
import threading

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.prometheus_harness import ScrapedExporter, running_prometheus

NOON_NS = day_start_ns() + 12 * 3600 * 10**9
START_NS = NOON_NS - 600 * 10**9
SECONDS = 1200
UUID = "GPU-0000aaaa-1111-2222-3333-444455556666"
ASSETS = "power_1s,energy_curve,power_100ms,phase_intervals,phase_segments,phase_timeline,request_energy,energy_per_token"


def _power():
    """10 Hz for 20 min around noon on infer-0 GPU 0: a ramp and a wave, so no two halves agree."""
    t = START_NS + np.arange(SECONDS * 10, dtype=np.int64) * 100_000_000
    s = (t - START_NS) / 1e9
    w = 150 + 0.2 * s + 80 * (np.sin(s / 7) > 0)
    return t, w


def _energy(t, w, lo, hi):
    """Trapezoid energy of the samples over [lo, hi] (both sample instants)."""
    m = (t >= lo) & (t <= hi)
    return float(np.sum((w[m][1:] + w[m][:-1]) / 2 * np.diff(t[m]) / 1e9))


def _inventory(d, *, endpoints=True, assignments=None, kubernetes=None):
    host = {"name": "infer-0" if endpoints else "train-0", "role": "inference" if endpoints else "training",
            "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H100", "uuid": UUID}, {"index": 1, "tdp_w": 700.0}]}
    if endpoints:  # A lists GPU 0 (its default); B is known from the assignments only, its model from here
        host["endpoints"] = [{"name": "ep-a", "gpus": [0], "model": "small"}, {"name": "ep-b", "gpus": [], "model": "big"}]
    else:  # both jobs list GPU 0: job_events say which holds it when
        host["jobs"] = [{"name": "job-a", "gpus": [0]}, {"name": "job-b", "gpus": [0]}]
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [host]}]}]}
    if assignments:
        inv["assignments"] = assignments
    if kubernetes:
        inv["kubernetes"] = kubernetes
    d.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")


def _requests(d):
    """One request a minute on each endpoint, each in its own half."""
    rows = []
    for ep, base in (("ep-a", START_NS), ("ep-b", NOON_NS)):
        for k in range(9):
            a = base + (30 + 60 * k) * 10**9
            rows.append((f"{ep}-{k}", ep, a, a, a + 2 * 10**9, a + 20 * 10**9, 500, 100))
    cols = list(zip(*rows, strict=True))
    ts = lambda v: pa.array(v, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))  # noqa: E731
    given = {"request_id": cols[0], "endpoint": cols[1], "arrival_ts": ts(cols[2]), "prefill_start_ts": ts(cols[3]),
             "first_token_ts": ts(cols[4]), "end_ts": ts(cols[5]), "prompt_tokens": pa.array(cols[6], pa.int32()),
             "output_tokens": pa.array(cols[7], pa.int32()), "status": ["ok"] * len(rows)}
    # columns the contract adds later (nullable) are written null
    table = pa.table({f.name: given.get(f.name, pa.nulls(len(rows), f.type)) for f in REQUESTS}, schema=REQUESTS)
    write_dataset(table, d, "requests")


def _endpoint_energy(d):
    con = duckdb.connect()
    con.register("pi", read_day(d, "phase_intervals", DAY.isoformat()))
    con.register("ept", read_day(d, "energy_per_token", DAY.isoformat()))
    got = dict(con.execute("SELECT endpoint, sum(energy_j) FROM pi GROUP BY 1").fetchall())
    per_token = dict(con.execute("SELECT endpoint, energy_j FROM ept WHERE bucket_kind = 'all'").fetchall())
    models = dict(con.execute("SELECT endpoint, bucket FROM ept WHERE bucket_kind = 'gpu_model'").fetchall())
    return got, per_token, models


def _check_split(d, t, w):
    want = {"ep-a": _energy(t, w, t[0], NOON_NS), "ep-b": _energy(t, w, NOON_NS, t[-1])}
    got, per_token, models = _endpoint_energy(d)
    for ep in want:
        assert got[ep] == pytest.approx(want[ep], rel=1e-6), (ep, got, want)
        assert per_token[ep] == pytest.approx(want[ep], rel=1e-6)
    assert got["ep-a"] + got["ep-b"] == pytest.approx(_energy(t, w, t[0], t[-1]), rel=1e-6)
    assert models == {"ep-a": "H100", "ep-b": "H100"}


def _power_day(d):
    t, w = _power()
    write_dataset(power_table("infer-0", 0, t, w), d, "power")
    _requests(d)
    return t, w


# The pod labels dcgm-exporter gives infer-0 GPU 0 (and a notebook pod on GPU 1), scraped by a real Prometheus.
STEP_S, STEPS = 10, 120  # one sample every 10 s from 11:50:00 to 12:09:50
POD_A, POD_B, NOTEBOOK = "chat-small-6d9f7c-x2k4p", "chat-big-55b8d9-q7r2m", "notebook-0"
RULES = {"rules": [{"match": {"namespace": "serving", "pod": "chat-small-*"}, "endpoint": "ep-a"},
                   {"match": {"pod": "chat-big-*"}, "endpoint": "ep-b"}]}

class PodExporter(ScrapedExporter):
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


def scraped(tmp, exporter: PodExporter):
    """Runs a real Prometheus on 127.0.0.1 until it has scraped all of ``exporter``; yields its URL."""
    window_d = (dt.datetime.now(dt.UTC).date() - DAY).days + 2  # the test's day is in the past
    with running_prometheus(tmp, exporter, STEPS, out_of_order_days=window_d) as url:
        yield url
