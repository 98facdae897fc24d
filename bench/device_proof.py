"""Device proof of the NVML collector on a real GPU (reproducible; run on the GPU host).

    python bench/device_proof.py --out OUTDIR [--seconds 130] [--gpu 0]

What it does, all in one run:
1. starts ``python -m collectors.nvml`` at its defaults (100 ms, buffer on, flush 10 s, energy
   30 s) into a scratch data dir, a second collector with 8 samplers on the same GPU (overhead of
   an 8-GPU host only; ``collector_overhead.run_replicated``) and
   ``nvidia-smi --query-gpu=timestamp,index,power.draw.instant --format=csv -lms 100``;
2. runs a PyTorch load on that GPU: ~3 s of back-to-back 8192² bf16 matmuls, ~2 s idle, repeated,
   logging each on/off edge's wall-clock time (on: just before the first launch; off: after the
   last synchronize);
3. stops everything with SIGTERM (the collector must exit 0), samples each process's CPU time and
   RSS from /proc during the run;
4. reads back the written Parquet and checks: every edge found in the instantaneous trace within
   200 ms; buffer trace median spacing ≤ 25 ms; energy counter vs integrated instantaneous power
   within 2 %; reports the collector's CPU (% of one core, steady state) and RSS next to nvidia-smi's.

Only reads GPU settings (power limit); never changes any. ``--analyze DATA_DIR EDGES_CSV`` re-runs
step 4 on saved results anywhere (pyarrow + numpy only).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collector_overhead import ProcessMeter  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EDGE_LIMIT_S = 0.200
SPACING_LIMIT_MS = 25.0
ENERGY_LIMIT_PCT = 2.0


# -- the load -----------------------------------------------------------------------------------
def run_load(gpu: int, seconds: float, on_s: float, off_s: float) -> list[tuple[str, int]]:
    """Alternate ~on_s of large bf16 matmuls with ~off_s idle; return [(edge, wall ns)]."""
    import torch

    dev = torch.device(f"cuda:{gpu}")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(5):  # warm-up (cuBLAS heuristics) outside the measured cycles
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    time.sleep(off_s)
    edges = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst_end = time.monotonic() + on_s
        edges.append(("on", time.time_ns()))
        while time.monotonic() < burst_end:
            for _ in range(20):  # ~30 ms of work per check at ~790 TFLOP/s
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize(dev)
        edges.append(("off", time.time_ns()))
        time.sleep(off_s)
    return edges


# -- analysis -------------------------------------------------------------------------------------
def load_trace(data_dir: Path, source: str, gpu: int):
    files = sorted((data_dir / "power").glob("date=*/host=*/*.parquet"))
    tables = [pq.read_table(f) for f in files]
    ts, pw, en = [], [], []
    for t in tables:
        t = t.filter(pc.and_(pc.equal(t["source"].cast("string"), source), pc.equal(t["gpu"], gpu)))
        ts.append(t["ts"].cast(pa.timestamp("ns", tz="UTC")).cast("int64").to_numpy())  # files hold µs
        pw.append(t["power_w"].to_numpy(zero_copy_only=False))
        en.append(t["energy_j"].to_numpy(zero_copy_only=False))
    ts, pw, en = np.concatenate(ts), np.concatenate(pw).astype(float), np.concatenate(en).astype(float)
    order = np.argsort(ts)
    return ts[order], pw[order], en[order], len(files)


def edge_delays(ts_ns, power_w, edges, threshold_w):
    """For each logged edge: first sample at or after (edge − 0.3 s) on the far side of the threshold."""
    out = []
    for kind, t_ns in edges:
        lo = np.searchsorted(ts_ns, t_ns - 300_000_000)
        seg_t, seg_p = ts_ns[lo:lo + 400], power_w[lo:lo + 400]
        hit = np.nonzero(seg_p > threshold_w if kind == "on" else seg_p < threshold_w)[0]
        out.append((kind, t_ns, (seg_t[hit[0]] - t_ns) / 1e9 if len(hit) else float("nan")))
    return out


def integrate_j(ts_ns, power_w, t0_ns, t1_ns):
    """Trapezoid integral of power between two instants (inclusive interpolation at the ends)."""
    ok = ~np.isnan(power_w)
    ts_ns, power_w = ts_ns[ok], power_w[ok]
    grid = np.concatenate([[t0_ns], ts_ns[(ts_ns > t0_ns) & (ts_ns < t1_ns)], [t1_ns]])
    p = np.interp(grid, ts_ns, power_w)
    return float(np.trapezoid(p, grid / 1e9) if hasattr(np, "trapezoid") else np.trapz(p, grid / 1e9))


def analyze(data_dir: Path, edges: list[tuple[str, int]], gpu: int = 0) -> dict:
    fts, fpw, fen, nfiles = load_trace(data_dir, "nvml-field", gpu)
    bts, bpw, _, _ = load_trace(data_dir, "nvml-buffer", gpu)
    first_on = edges[0][1]
    idle_w = float(np.nanmedian(fpw[fts < first_on - 200_000_000])) if (fts < first_on - 200_000_000).any() else 100.0
    busy = np.zeros_like(fts, dtype=bool)
    for (_k1, t1), (_k2, t2) in zip(edges[::2], edges[1::2], strict=False):
        busy |= (fts > t1 + 500_000_000) & (fts < t2 - 200_000_000)
    busy_w = float(np.nanmedian(fpw[busy]))
    thr = (idle_w + busy_w) / 2
    res = {"field_rows": int(len(fts)), "buffer_rows": int(len(bts)), "parquet_files": nfiles,
           "idle_w_median": round(idle_w, 1), "busy_w_median": round(busy_w, 1), "threshold_w": round(thr, 1),
           "field_spacing_ms_median": round(float(np.median(np.diff(fts))) / 1e6, 2),
           "field_max_w": round(float(np.nanmax(fpw)), 1), "buffer_max_w": round(float(np.nanmax(bpw)), 1)}
    for name, ts, pw in (("instant", fts, fpw), ("buffer", bts, bpw)):
        d = edge_delays(ts, pw, edges, thr)
        delays = np.array([x[2] for x in d])
        absd = np.abs(delays)
        res[f"edges_{name}"] = {
            "n": len(d), "found": int(np.sum(~np.isnan(delays))),
            "within_200ms": int(np.sum(absd <= EDGE_LIMIT_S)),
            "delay_s_median": round(float(np.nanmedian(delays)), 3),
            "abs_delay_s_p90": round(float(np.nanpercentile(absd, 90)), 3),
            "abs_delay_s_max": round(float(np.nanmax(absd)), 3),
            "on_delay_s_median": round(float(np.nanmedian([x[2] for x in d if x[0] == "on"])), 3),
            "off_delay_s_median": round(float(np.nanmedian([x[2] for x in d if x[0] == "off"])), 3),
        }
    res["buffer_spacing_ms_median"] = round(float(np.median(np.diff(bts))) / 1e6, 2)
    res["buffer_gaps_over_100ms"] = int(np.sum(np.diff(bts) > 100_000_000))
    e_ok = ~np.isnan(fen)
    ets, evals = fts[e_ok], fen[e_ok]
    res["energy_reads"] = int(len(ets))
    if len(ets) >= 2:
        counter = float(evals[-1] - evals[0])
        inst = integrate_j(fts, fpw, ets[0], ets[-1])
        buf = integrate_j(bts, bpw, ets[0], ets[-1])
        res["energy"] = {"window_s": round((ets[-1] - ets[0]) / 1e9, 1), "counter_j": round(counter, 1),
                         "instant_integral_j": round(inst, 1), "buffer_integral_j": round(buf, 1),
                         "instant_vs_counter_pct": round(100 * (inst - counter) / counter, 3),
                         "buffer_vs_counter_pct": round(100 * (buf - counter) / counter, 3)}
    e = res.get("energy", {})
    res["pass"] = {
        "edges_instant_within_200ms": res["edges_instant"]["within_200ms"] == res["edges_instant"]["n"],
        "buffer_median_spacing_le_25ms": res["buffer_spacing_ms_median"] <= SPACING_LIMIT_MS,
        "energy_within_2pct": bool(e) and abs(e["instant_vs_counter_pct"]) <= ENERGY_LIMIT_PCT,
    }
    return res


def call_costs(gpu: int) -> dict:
    """CPU µs per call of each collector read through the real binding (process_time, this process)."""
    sys.path.insert(0, str(REPO))
    from collectors.nvml.nvml_source import GpuReader, load_nvml

    r = GpuReader(load_nvml(), gpu)
    r.reopen()
    out = {"buffer_samples_direct": len(r.read_buffer(0))}
    r2 = GpuReader(r.nvml, gpu)
    r2.reopen()
    r2.direct_buffer = False
    out["buffer_direct_path_available"] = r.direct_buffer
    for name, fn, n in (("read_fast (fields 186+185, one call)", r.read_fast, 500),
                        ("read_buffer (one direct C call)", lambda: r.read_buffer(0), 50),
                        ("read_buffer (pynvml wrapper, two calls)", lambda: r2.read_buffer(0), 50),
                        ("read_energy_j", r.read_energy_j, 10),
                        ("slow reads (clock, util, mem, temp, limit)", lambda: (r.read_sm_clock_mhz(), r.read_util_pct(),
                         r.read_mem_used_mib(), r.read_temp_c(), r.read_power_limit_w()), 200),
                        ("time.sleep(0.1) wake-up", lambda: time.sleep(0.1), 20)):
        t = time.process_time()
        for _ in range(n):
            fn()
        out[name] = round((time.process_time() - t) / n * 1e6, 1)
    out["buffer_direct_still_on"] = r.direct_buffer
    out["buffer_samples_wrapper"] = len(r2.read_buffer(0))
    return out


def restart_check(out: Path, gpu: int, flush_s: float = 2.0) -> dict:
    """kill -9 the collector mid-run on the real GPU, restart it at once, then check: every visible
    file reads back, no (gpu, source, ts) is written twice, and how much of each trace was lost."""
    data = Path("/tmp/wattline-restart")
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, "-m", "collectors.nvml", "--host", "h200", "--gpus", str(gpu),
           "--flush-seconds", str(flush_s), "--data-dir", str(data)]
    log = open(out / "restart.log", "w")
    first = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=log)
    time.sleep(6.3)
    t_kill = time.time_ns()
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=log)
    time.sleep(5.0)
    second.send_signal(signal.SIGTERM)
    rc = second.wait(timeout=60)
    res = {"restart_exit_code": rc, "flush_s": flush_s}
    files = sorted((data / "power").glob("date=*/host=*/*.parquet"))
    res["files"] = len(files)
    res["hidden_files_visible"] = len([p for p in files if p.name.startswith(".")])
    for source in ("nvml-field", "nvml-buffer"):
        ts, _, _, _ = load_trace(data, source, gpu)
        gaps = np.diff(ts)
        i = int(np.argmax(gaps))
        res[source] = {"rows": int(len(ts)), "duplicates": int(len(ts) - len(np.unique(ts))),
                       "largest_gap_s": round(float(gaps[i]) / 1e9, 3),
                       "gap_starts_before_kill_s": round((t_kill - float(ts[i])) / 1e9, 3)}
    res["pass"] = (rc == 0 and res["hidden_files_visible"] == 0
                   and all(res[s]["duplicates"] == 0 for s in ("nvml-field", "nvml-buffer"))
                   and res["nvml-field"]["gap_starts_before_kill_s"] <= flush_s + 0.2)
    return res


# -- the run --------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=130)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--on", type=float, default=3.0)
    ap.add_argument("--off", type=float, default=2.0)
    ap.add_argument("--replicate", type=int, default=8, help="samplers of the overhead-only collector")
    ap.add_argument("--analyze", nargs=2, metavar=("DATA_DIR", "EDGES_CSV"))
    ap.add_argument("--restart-check", action="store_true", help="only the kill -9 + restart check")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.restart_check:
        res = restart_check(a.out, a.gpu)
        (a.out / "restart.json").write_text(json.dumps(res, indent=1))
        print(json.dumps(res, indent=1))
        return
    if a.analyze:
        with open(a.analyze[1]) as fh:
            edges = [(r["edge"], int(r["wall_ns"])) for r in csv.DictReader(fh)]
        print(json.dumps(analyze(Path(a.analyze[0]), edges, a.gpu), indent=1))
        return

    work = Path("/tmp/wattline-proof")
    data, data_nb = work / "data", work / "data-replicated"
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")
    base = [sys.executable, "-m", "collectors.nvml", "--host", "h200", "--gpus", str(a.gpu), "--status-seconds", "30"]
    work.mkdir(parents=True, exist_ok=True)
    log = open(a.out / "collector.log", "w")
    log_nb = open(a.out / "collector-replicated.log", "w")
    col = subprocess.Popen([*base, "--data-dir", str(data)], env=env, cwd=REPO, stderr=log, stdout=log)
    # 8 samplers on this one GPU through the real NVML: the CPU cost of an 8-GPU host (see run_replicated)
    col_nb = subprocess.Popen([sys.executable, str(REPO / "bench" / "collector_overhead.py"), "--child-replicated",
                               str(a.replicate), str(data_nb)], env=env, cwd=REPO, stderr=log_nb, stdout=log_nb)
    smi_out = open(a.out / "nvidia-smi.csv", "w")
    smi_cmd = ["nvidia-smi", f"--id={a.gpu}", "--query-gpu=timestamp,index,power.draw.instant", "--format=csv",
               "-lms", "100"]
    smi = subprocess.Popen(smi_cmd if not os.environ.get("PROOF_NO_SMI") else ["sleep", "100000"],
                           stdout=smi_out, stderr=subprocess.STDOUT)
    meters = [ProcessMeter(col, "wattline collect (defaults, buffer on)"),
              ProcessMeter(col_nb, f"collector, {a.replicate} samplers on GPU {a.gpu} (defaults, buffer on)"),
              ProcessMeter(smi, " ".join(smi_cmd))]

    import threading
    stop = threading.Event()

    def sample_loop():
        while not stop.is_set():
            for m in meters:
                m.sample()
            stop.wait(2.0)

    sampler = threading.Thread(target=sample_loop, daemon=True)
    sampler.start()
    time.sleep(4.0)  # collectors start, idle baseline
    t_load = time.monotonic()
    edges = run_load(a.gpu, a.seconds, a.on, a.off)
    load_s = time.monotonic() - t_load
    time.sleep(3.0)
    for m in meters:
        m.sample()
    stop.set()
    sampler.join()
    for p in (col, col_nb, smi):
        p.send_signal(signal.SIGTERM)
    rc = col.wait(timeout=60)
    rc_nb = col_nb.wait(timeout=60)
    smi.wait(timeout=30)
    with open(a.out / "edges.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["edge", "wall_ns"])
        w.writerows(edges)
    res = {"collector_exit_code": rc, "replicated_exit_code": rc_nb, "load_s": round(load_s, 1),
           "cycles": len(edges) // 2}
    status = data / "collector" / "h200.status.json"
    res["status"] = json.loads(status.read_text()) if status.exists() else None
    res["overhead"] = [m.report(warmup_s=8.0, gpus=g) for m, g in zip(meters, (1, a.replicate, 1), strict=False)]
    rep = json.loads((data_nb / "collector" / "replicated.status.json").read_text()) \
        if (data_nb / "collector" / "replicated.status.json").exists() else None
    res["replicated_status"] = rep
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(a.gpu)
        res["gpu"] = {"name": str(pynvml.nvmlDeviceGetName(h)), "driver": str(pynvml.nvmlSystemGetDriverVersion()),
                      "enforced_power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000}
    except Exception as exc:
        res["gpu"] = {"error": str(exc)}
    try:
        res["call_cpu_us"] = call_costs(a.gpu)
    except Exception as exc:
        res["call_cpu_us"] = {"error": repr(exc)}
    try:
        res["analysis"] = analyze(data, edges, a.gpu)
    except Exception as exc:
        res["analysis_error"] = repr(exc)
    (a.out / "proof.json").write_text(json.dumps(res, indent=1))
    with tarfile.open(a.out / "power-parquet.tar", "w") as tar:
        tar.add(data / "power", arcname="power")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
