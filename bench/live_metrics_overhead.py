"""Live metrics and alerts on a real GPU: gauges vs the collector's own Parquet, alert latency, CPU cost.

    python3 bench/live_metrics_overhead.py --out OUTDIR [--seconds 120] [--gpu 0] [--replicate 8]
    python3 bench/live_metrics_overhead.py --out OUTDIR --fake-gpus 2 --seconds 40    # CI machine, fake NVML

What it does, in one run (results in OUTDIR/live_metrics.json, also printed):
1. starts two collectors on the same GPU at their defaults (100 ms, buffer drained every 1 s): A plain,
   B with ``--metrics-listen 127.0.0.1:PORT --alerts RULES`` (a GPU power rule, a GPU and a host 2 s
   swing rule, no hold, webhook to a local HTTP receiver in this process); with ``--replicate N`` also
   two collectors with N samplers on the GPU (an N-GPU host's cost, see collector_overhead.run_replicated),
   with and without metrics+alerts;
2. scrapes B's endpoint every ``--scrape-every`` s (default 1 s, as a Prometheus would) while PyTorch
   alternates ~3 s of 8192² bf16 matmuls with ~2 s idle (device_proof.run_load; none with the fake);
3. stops everything with SIGTERM, then checks:
   * every scraped GPU 0 max/min/swing (2, 10, 60 s) equals the same statistic recomputed from B's
     Parquet ``nvml-buffer`` rows in (anchor − W, anchor], anchor = the scraped
     ``wattline_gpu_last_sample_timestamp_seconds`` (same window, same samples; float32 tolerance);
     the host gauges likewise against a numpy 20 ms sample-and-hold grid;
   * alert latency: webhook receipt time − driver timestamp of the crossing sample, per firing (≤ 2 s);
     every load "on" edge produced a firing of the power rule;
   * CPU (% of one core, steady state, from /proc) of A and B, B − A per GPU (target ≤ +0.1 % of a core
     per GPU), the same for the N-sampler pair divided by N; and tick timing (field-row spacing, buffer
     gaps) of A vs B.

Needs pyarrow, numpy, click, nvidia-ml-py, prometheus-client, pyyaml and pydantic in the python that
runs it (``--wheels DIR`` installs missing ones from wheel files first, offline).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collector_overhead import ProcessMeter, replicated_collector  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WINDOWS = (2, 10, 60)
LATENCY_LIMIT_S = 2.0
TARGET_PCT_PER_GPU = 0.1
TOLERANCE_W = 0.01  # Parquet keeps power_w as float32


def ensure_packages(wheels: Path | None) -> None:
    missing = []
    for mod in ("prometheus_client", "pydantic", "yaml"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing and wheels:
        names = [{"prometheus_client": "prometheus-client", "yaml": "pyyaml"}.get(m, m) for m in missing]
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), *names],
                       check=True)
    elif missing:
        sys.exit(f"error: missing Python packages {missing}: pass --wheels DIR holding their wheels")


def rules_yaml(hook_url: str, power_w: float, swing_w: float) -> str:
    return (f"webhook: {{url: '{hook_url}', timeout_s: 2, retries: 2}}\n"
            "rules:\n"
            f"  - {{name: gpu_power, level: gpu, quantity: power_w, threshold: {power_w}}}\n"
            f"  - {{name: gpu_swing_2s, level: gpu, quantity: swing_2s_w, threshold: {swing_w}}}\n"
            f"  - {{name: host_swing_2s, level: host, quantity: swing_2s_w, threshold: {swing_w}}}\n")


class Receiver:
    def __init__(self):
        got = self.events = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def parse_metrics(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("wattline_alert"):  # rule / outcome labels
                key = (s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())), "")
            else:
                key = (s.name, s.labels.get("gpu", ""), s.labels.get("window", ""))
            out[key] = s.value
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- child: N samplers on one GPU, with or without metrics+alerts ------------------------------------
def run_replicated_live(copies: int, data_dir: Path, gpu: int, listen: str | None, rules: str | None) -> int:
    c = replicated_collector(copies, data_dir, gpu)
    if listen or rules:
        from collectors.nvml.cli import load_live_config, parse_listen

        c.cfg.metrics_listen = parse_listen(listen, False) if listen else None
        c.cfg.alerts, _ = load_live_config(rules, None, "replicated")
        c._start_live(list(range(copies)))
    return c.run()


# -- analysis -----------------------------------------------------------------------------------------
def load_series(data_dir: Path, source: str, gpu: int):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ts, pw = [], []
    for f in sorted((data_dir / "power").glob("date=*/host=*/*.parquet")):
        t = pq.read_table(f)
        t = t.filter(pc.and_(pc.equal(t["source"].cast("string"), source), pc.equal(t["gpu"], gpu)))
        ts.append(t["ts"].cast(pa.timestamp("us", tz="UTC")).cast("int64").to_numpy())
        pw.append(t["power_w"].to_numpy(zero_copy_only=False).astype(float))
    ts, pw = np.concatenate(ts), np.concatenate(pw)
    o = np.argsort(ts)
    return ts[o], pw[o]


def compare_gpu(scrapes: list[dict], ts: np.ndarray, pw: np.ndarray) -> dict:
    diffs, n, bad = [], 0, []
    for s in scrapes:
        a = s.get(("wattline_gpu_last_sample_timestamp_seconds", "0", ""))
        if a is None:
            continue
        a_us = round(a * 1e6)
        for w in WINDOWS:
            sel = pw[(ts > a_us - w * 1_000_000) & (ts <= a_us)]
            if not len(sel):
                bad.append((a_us, w, "no Parquet samples"))
                continue
            for k, ref in (("max", sel.max()), ("min", sel.min()), ("swing", sel.max() - sel.min())):
                got = s.get((f"wattline_gpu_power_{k}_watts", "0", f"{w}s"))
                d = abs(got - ref)
                diffs.append(d)
                n += 1
                if d > TOLERANCE_W:
                    bad.append((a_us, w, k, got, float(ref)))
    return {"scrapes": len(scrapes), "values_compared": n, "max_abs_diff_w": round(max(diffs), 6) if diffs else None,
            "disagreements": len(bad), "first_disagreements": bad[:5], "pass": n > 0 and not bad}


def host_grid(ts: np.ndarray, pw: np.ndarray, lo_us: int, hi_us: int):
    """One-GPU host: 20 ms slot ends in [lo, hi], each the latest sample ≤ end if ≤ 250 ms old."""
    ends = np.arange(-(-lo_us // 20_000) * 20_000, hi_us + 1, 20_000)
    i = np.searchsorted(ts, ends, side="right") - 1
    ok = (i >= 0) & (ends - ts[np.clip(i, 0, None)] <= 250_000)
    return ends[ok], pw[i[ok]]


def compare_host(scrapes: list[dict], ts: np.ndarray, pw: np.ndarray) -> dict:
    diffs, bad = [], []
    for s in scrapes:
        a = s.get(("wattline_host_last_slot_timestamp_seconds", "", ""))
        if a is None:
            continue
        a_us = round(a * 1e6)
        for w in WINDOWS:
            ends, vals = host_grid(ts, pw, a_us - w * 1_000_000 + 1, a_us)
            if not len(vals):
                continue
            got = s.get(("wattline_host_power_swing_watts", "", f"{w}s"))
            d = abs(got - (vals.max() - vals.min()))
            diffs.append(d)
            if d > TOLERANCE_W:
                bad.append((a_us, w, got, float(vals.max() - vals.min())))
    return {"values_compared": len(diffs), "max_abs_diff_w": round(max(diffs), 6) if diffs else None,
            "disagreements": len(bad), "first_disagreements": bad[:5], "pass": bool(diffs) and not bad}


def tick_timing(data_dir: Path, gpu: int) -> dict:
    fts, _ = load_series(data_dir, "nvml-field", gpu)
    bts, _ = load_series(data_dir, "nvml-buffer", gpu)
    g = np.diff(fts) / 1000
    b = np.diff(bts) / 1000
    return {"field_rows": int(len(fts)), "field_spacing_ms_median": round(float(np.median(g)), 2),
            "field_spacing_ms_p99": round(float(np.percentile(g, 99)), 2), "field_spacing_ms_max": round(float(g.max()), 2),
            "buffer_spacing_ms_median": round(float(np.median(b)), 2), "buffer_gaps_over_100ms": int(np.sum(b > 100))}


def latency(events, edges, started_unix_s: float) -> dict:
    """Firings whose crossing sample came from the driver's 2.4 s history drained at start are left out
    (counted): they were older than 2 s before the collector existed."""
    fires = [(t, e) for t, e in events if e["status"] == "firing" and e["crossed_unix_s"] >= started_unix_s]
    out = {"firings_from_startup_history": sum(1 for _, e in events
                                               if e["status"] == "firing" and e["crossed_unix_s"] < started_unix_s)}
    for rule in sorted({e["rule"] for _, e in fires}):
        lat = np.array([t - e["crossed_unix_s"] for t, e in fires if e["rule"] == rule])
        out[rule] = {"firings": int(len(lat)), "latency_s_median": round(float(np.median(lat)), 3),
                     "latency_s_p90": round(float(np.percentile(lat, 90)), 3),
                     "latency_s_max": round(float(lat.max()), 3)}
    power = sorted(e["crossed_unix_s"] for _, e in fires if e["rule"] == "gpu_power")
    ons = [t / 1e9 for k, t in edges if k == "on"]
    matched = sum(1 for t in ons if any(t - 0.3 <= c <= t + 1.0 for c in power))
    all_lat = [t - e["crossed_unix_s"] for t, e in fires]
    out["on_edges"] = len(ons)
    out["on_edges_with_a_power_firing"] = matched
    out["pass"] = bool(all_lat) and max(all_lat) <= LATENCY_LIMIT_S and (not ons or matched == len(ons))
    return out


# -- the run ------------------------------------------------------------------------------------------
def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-replicated-live":
        _, _, copies, data, gpu, listen, rules = sys.argv
        sys.exit(run_replicated_live(int(copies), Path(data), int(gpu), listen or None, rules or None))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--on", type=float, default=3.0)
    ap.add_argument("--off", type=float, default=2.0)
    ap.add_argument("--replicate", type=int, default=8, help="samplers of the N-GPU stand-in pair (0: skip)")
    ap.add_argument("--scrape-every", type=float, default=1.0)
    ap.add_argument("--power-threshold-w", type=float, default=400.0)
    ap.add_argument("--swing-threshold-w", type=float, default=300.0)
    ap.add_argument("--fake-gpus", type=int, default=0, help="fake NVML with this many GPUs, no load (CI check)")
    ap.add_argument("--wheels", type=Path, default=None, help="install missing packages from these wheels first")
    a = ap.parse_args()
    ensure_packages(a.wheels)
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.out / "work"
    shutil.rmtree(work, ignore_errors=True)  # a fresh data dir: no resume from an earlier run
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")
    fake = []
    if a.fake_gpus:
        env["WATTLINE_FAKE_NVML"] = json.dumps({"gpus": a.fake_gpus})
        fake = ["--nvml-module", "tests.fakes.fake_pynvml"]
        a.replicate = 0
    rx = Receiver()
    rules = a.out / "alerts.yaml"
    rules.write_text(rules_yaml(rx.url, a.power_threshold_w, a.swing_threshold_w))
    port, port_c = free_port(), free_port()
    gpus = [] if a.fake_gpus else ["--gpus", str(a.gpu)]
    base = [sys.executable, "-m", "collectors.nvml", "--host", "bench", *gpus, *fake]
    procs = {
        "A: defaults": [*base, "--data-dir", str(work / "plain")],
        "B: defaults + metrics + alerts": [*base, "--data-dir", str(work / "live"), "--metrics-listen",
                                           f"127.0.0.1:{port}", "--alerts", str(rules)],
        "C: defaults + metrics": [*base, "--data-dir", str(work / "metrics"), "--metrics-listen", f"127.0.0.1:{port_c}"],
    }
    rep_port = free_port()
    if a.replicate:
        me = [sys.executable, str(Path(__file__).resolve()), "--child-replicated-live", str(a.replicate)]
        procs[f"A{a.replicate}: {a.replicate} samplers"] = [*me, str(work / "rep-plain"), str(a.gpu), "", ""]
        procs[f"B{a.replicate}: {a.replicate} samplers + metrics + alerts"] = [
            *me, str(work / "rep-live"), str(a.gpu), f"127.0.0.1:{rep_port}", str(rules)]
    running, meters, started = {}, [], {}
    for name, cmd in procs.items():
        started[name.split(":")[0]] = time.time() + 3.0  # imports and first drain; history before is old
        log = open(a.out / f"{name.split(':')[0]}.log", "w")
        running[name] = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=log)
        meters.append(ProcessMeter(running[name], name))
    scrapes, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            for m in meters:
                m.sample()
            for p in ([port, port_c, rep_port] if a.replicate else [port, port_c]):
                try:
                    text = urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=2).read().decode()
                    if p == port:
                        scrapes.append(parse_metrics(text))
                except OSError:
                    pass
            stop.wait(a.scrape_every)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(4.0)
    edges = []
    t_load = time.monotonic()
    if a.fake_gpus:
        time.sleep(a.seconds)
    else:
        sys.path.insert(0, str(REPO / "bench"))
        from device_proof import run_load

        edges = run_load(a.gpu, a.seconds, a.on, a.off)
    load_s = time.monotonic() - t_load
    time.sleep(3.0)
    stop.set()
    poller.join()
    for m in meters:
        m.sample()
    for p in running.values():
        p.send_signal(signal.SIGTERM)
    codes = {n: p.wait(timeout=60) for n, p in running.items()}
    time.sleep(2.5)  # webhook deliveries still in flight
    n_rep = max(1, a.replicate)
    ngpu = a.fake_gpus or 1
    over = [m.report(warmup_s=8.0, gpus=ngpu if i < 3 else n_rep) for i, m in enumerate(meters)]
    res = {"exit_codes": codes, "load_s": round(load_s, 1), "cycles": len(edges) // 2, "fake_gpus": a.fake_gpus,
           "scrape_every_s": a.scrape_every, "overhead": over}
    delta = (over[1]["cpu_pct_of_one_core"] - over[0]["cpu_pct_of_one_core"]) / ngpu
    res["metrics_alerts_cpu_pct_per_gpu"] = round(delta, 4)
    res["metrics_only_cpu_pct_per_gpu"] = round((over[2]["cpu_pct_of_one_core"] - over[0]["cpu_pct_of_one_core"]) / ngpu, 4)
    if a.replicate:
        res[f"metrics_alerts_cpu_pct_per_gpu_at_{a.replicate}"] = round(
            (over[4]["cpu_pct_of_one_core"] - over[3]["cpu_pct_of_one_core"]) / a.replicate, 4)
    res["target_pct_per_gpu"] = TARGET_PCT_PER_GPU
    g0 = 0
    bts, bpw = load_series(work / "live", "nvml-buffer", g0)
    res["gauges_vs_parquet_gpu0"] = compare_gpu(scrapes, bts, bpw)
    if ngpu == 1:
        res["host_gauges_vs_parquet"] = compare_host(scrapes, bts, bpw)
    res["tick_timing"] = {"A": tick_timing(work / "plain", g0), "B": tick_timing(work / "live", g0)}
    res["alerts"] = {"events": len(rx.events), "events_per_s": round(len(rx.events) / max(load_s, 1), 2), **latency(rx.events, edges, started["B"])}
    if not edges:
        res["alerts"]["pass"] = res["alerts"]["pass"] or None  # no load edges with the fake
    last = scrapes[-1] if scrapes else {}
    res["alert_counters_last_scrape"] = {f"{n}{{{lab}}}": v for (n, lab, _), v in last.items()
                                         if n.startswith("wattline_alert") and not n.startswith("wattline_alert_firing")}
    ev = res["alerts"]["events"]
    if ev:  # the CPU of the alert traffic itself (log line + webhook POST per firing/resolution)
        cpu_b_c = (over[1]["cpu_pct_of_one_core"] - over[2]["cpu_pct_of_one_core"]) / 100 * over[1]["window_s"]
        res["alerts"]["cpu_ms_per_event_est"] = round(1000 * cpu_b_c / ev, 3)
    res["pass"] = {
        "gauges_equal_parquet": res["gauges_vs_parquet_gpu0"]["pass"],
        "alert_latency_le_2s": res["alerts"]["pass"],
        "cpu_le_0.1pct_per_gpu": delta <= TARGET_PCT_PER_GPU,
    }
    (a.out / "live_metrics.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
