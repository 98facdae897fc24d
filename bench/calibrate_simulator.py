"""Fit the simulator's per-GPU engine and power parameters on one real H200 capture, validate on another.

    python bench/calibrate_simulator.py [--data ../shared/data] [--out docs/img]

Fit on ``h200-capture-4`` (continuous batching, the policy the simulator's engine models: 368 requests,
each prefilled alone with a device synchronize on both sides, so prefill duration vs tokens is clean;
capture 2 has only 8 prefills, static batches padded to their longest prompt). Validate on
``h200-capture-2``, not used for fitting: its logged workload (prefills, decodes, training steps,
waits and checkpoints) is turned into a phase timeline with the fitted levels and sampled by the
simulator's power model at the driver buffer's timestamps; its 8 padded prefill batches are timed by
the fitted prefill model. Also an in-sample check: capture 4's arrivals replayed through the engine.

Energy per token (docs/simulator.md, "Calibration against captures and published points"): J per
prompt token and per output token, measured and simulated the same way (``calibration.joules_per_token``),
for capture 4 (fit; continuous batching), capture 2 (validation; replayed through the engine's static
batching, nothing refitted), and the vLLM A100 smoke run (Qwen3-8B, 8.2B parameters, on one 400 W A100;
the run without prefix caching) through ``engine: vllm``, whose two parameters are fitted on it
(``fit_vllm``: the fixed cost per step, decode's energy per byte), and through the capture's engine; then
the simulator at two published points (ML.ENERGY's, on vLLM, validates the vLLM engine), and the vLLM
engine against a longer H100 run it was not fitted on (``h100_check``).

Prints the fitted values (compare with ``collectors/simulate/calibration.py``, which holds them), the
two-sample Kolmogorov–Smirnov statistic of each comparison, the energy-per-token table, and writes the
PNGs for docs/simulator.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from collectors.simulate import calibration, phases, physics, power  # noqa: E402
from collectors.simulate.arrivals import Arrivals  # noqa: E402
from collectors.simulate.serving_engine import run_engine  # noqa: E402

RAMP_NS = 80_000_000
"""Samples this long after a phase starts are left out of level fits (the onset delay and ramp)."""


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov statistic: the largest gap between the two empirical CDFs."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    x = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, x, side="right") / len(a) - np.searchsorted(b, x, side="right") / len(b))))


def _csv(path: Path) -> dict[str, np.ndarray]:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


class Capture:
    def __init__(self, root: Path):
        self.name = root.name
        self.marks = {ln.split()[0]: int(ln.split()[1]) for ln in (root / "phases.txt").read_text().splitlines()
                      if len(ln.split()) == 2 and ln.split()[1].isdigit()}
        r = _csv(root / "requests.csv")
        self.arrival, self.ps, self.ft, self.end = (r[c].astype(np.int64) for c in ("arrival_ns", "prefill_start_ns", "first_token_ns", "end_ns"))
        self.prompt, self.output = r["prompt_tokens"].astype(np.int64), r["output_tokens"].astype(np.int64)
        self.batch_size = r["batch_size"].astype(np.int64)
        s = _csv(root / "train_steps.csv")
        self.st, self.se, self.kind = s["start_ns"].astype(np.int64), s["end_ns"].astype(np.int64), s["kind"]
        b = np.loadtxt(root / "driver_buffer.csv", delimiter=",", skiprows=1)
        self.bt, self.bw = b[:, 1].astype(np.int64) * 1000, b[:, 2] / 1000.0

    def prefills(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, tokens) of each prefill pass; a static batch is padded to its longest prompt."""
        starts, idx = np.unique(self.ps, return_inverse=True)
        ends = np.array([self.ft[idx == i][0] for i in range(len(starts))])
        tokens = np.array([len(self.prompt[idx == i]) * self.prompt[idx == i].max() for i in range(len(starts))])
        return starts, ends, tokens

    def running(self, t: np.ndarray) -> np.ndarray:
        return ((self.ft[None, :] <= t[:, None]) & (self.end[None, :] > t[:, None])).sum(axis=1)

    def inside(self, t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        order = np.argsort(start)
        s, e = start[order], np.maximum.accumulate(end[order])
        i = np.searchsorted(s, t, side="right") - 1
        return (i >= 0) & (t < e[np.maximum(i, 0)])

    def serving(self) -> np.ndarray:
        return (self.bt > self.marks["infer"]) & (self.bt < self.marks["idle1"])


def fit(cap: Capture) -> dict[str, float]:
    out: dict[str, float] = {}
    t, w = cap.bt, cap.bw
    out["idle_w"] = float(np.median(w[t < cap.marks["infer"]]))
    ps, pe, tokens = cap.prefills()
    d = (pe - ps) / 1e9
    a = np.vstack([np.ones(len(tokens)), tokens]).T
    coef = np.linalg.lstsq(a, d, rcond=None)[0]
    out["prefill_overhead_s"], out["prefill_s_per_token"] = float(coef[0]), float(coef[1])
    out["prefill_duration_sd_rel"] = float(np.std(d / (a @ coef)))
    # onset: event-triggered median of long prefills, first 20 ms step where power is past half-way
    long = (pe - ps) > 150_000_000
    grid = np.arange(0, 200, 10) * 1_000_000
    trace = np.array([np.median(np.interp(ps[long] + g, t, w)) for g in grid])
    half = trace[0] + 0.5 * (np.max(trace) - trace[0])
    out["prefill_onset_s"] = float(grid[np.argmax(trace > half)] / 1e9)
    plateau = [np.median(w[(t >= s + RAMP_NS) & (t < e)]) for s, e in zip(ps, pe, strict=False) if ((t >= s + RAMP_NS) & (t < e)).sum() >= 2]
    out["prefill_plateau_w"] = float(np.median(plateau))
    out["prefill_plateau_sd_w"] = float((np.percentile(plateau, 90) - np.percentile(plateau, 10)) / 2.563)
    serving = cap.serving()
    busy = cap.inside(t, ps - 20_000_000, pe + RAMP_NS)
    run = cap.running(t)
    out["loaded_w"] = float(np.median(w[serving & ~busy & (run == 0)]))
    dec = serving & ~busy & (run > 0)
    # decode level: base + span × (1 − exp(−running / scale)), least squares on per-running medians
    rs = np.unique(run[dec])
    med = np.array([np.median(w[dec & (run == r)]) for r in rs])
    n = np.array([(dec & (run == r)).sum() for r in rs])
    best = None
    for scale in np.arange(1.0, 60.0, 0.5):
        x = 1 - np.exp(-rs / scale)
        a = np.vstack([np.ones(len(rs)), x]).T * np.sqrt(n)[:, None]
        c, *_ = np.linalg.lstsq(a, med * np.sqrt(n), rcond=None)
        err = float(np.sum(n * (med - c[0] - c[1] * x) ** 2))
        if best is None or err < best[0]:
            best = (err, float(c[0]), float(c[1]), float(scale))
    out["decode_base_w"], out["decode_span_w"], out["decode_scale_seqs"] = best[1:]
    rel = w[dec] / (best[1] + best[2] * (1 - np.exp(-run[dec] / best[3])))
    q25, q75 = np.percentile(np.log(rel), [25, 75])
    out["decode_log_sd"] = float((q75 - q25) / 1.349)  # right-skewed: lognormal around the level
    # decode step time vs running, prefill time inside each request's decode taken out
    k = cap.output > 8
    pre_s = np.array([np.sum(np.clip(np.minimum(pe, b) - np.maximum(ps, a), 0, None)) / 1e9 for a, b in zip(cap.ft, cap.end, strict=False)])
    step = ((cap.end - cap.ft) / 1e9 - pre_s) / np.maximum(cap.output - 1, 1)
    mean_run = np.array([np.mean(cap.running(np.linspace(a, b, 16).astype(np.int64))) for a, b in zip(cap.ft, cap.end, strict=False)])
    a = np.vstack([np.ones(k.sum()), mean_run[k]]).T
    c = np.linalg.lstsq(a, step[k], rcond=None)[0]
    out["decode_step_s"], out["decode_step_s_per_seq"] = float(c[0]), float(max(c[1], 0.0))
    for kind in np.unique(cap.kind):
        m = cap.kind == kind
        inner = cap.inside(t, cap.st[m] + RAMP_NS, cap.se[m] - 10_000_000)
        out[f"train_{kind}_w"] = float(np.median(w[inner]))
        if kind == "step":
            per = [np.median(w[(t >= s + RAMP_NS) & (t < e - 10_000_000)]) for s, e in zip(cap.st[m], cap.se[m], strict=False)
                   if ((t >= s + RAMP_NS) & (t < e - 10_000_000)).sum() >= 2]
            out["train_step_w_p25"], out["train_step_w_p75"] = (float(x) for x in np.percentile(per, [25, 75]))
    return out


def logged_timeline(cap: Capture, t0: int) -> phases.Timeline:
    """The capture's own logged workload as a phase timeline with the simulator's (fitted) levels."""
    c = calibration
    ps, pe, tokens = cap.prefills()
    edges = np.unique(np.concatenate([ps, pe, cap.ft, cap.end, cap.st, cap.se, list(cap.marks.values())]))
    mid = (edges[:-1] + edges[1:]) // 2
    kind = np.full(len(mid), phases.IDLE, np.uint8)
    level = np.full(len(mid), c.IDLE_W, np.float32)
    serving = (mid > cap.marks["infer"]) & (mid < cap.marks["idle1"])
    kind[serving], level[serving] = phases.LOADED, c.LOADED_W
    run = cap.running(mid)
    m = serving & (run > 0)
    kind[m], level[m] = phases.DECODE, phases.decode_w(run[m])
    m = cap.inside(mid, ps, pe)
    kind[m], level[m] = phases.PREFILL, c.PREFILL_PLATEAU_W
    for name, k, lv in (("step", phases.STEP, np.mean(c.STEP_W)), ("comm_wait", phases.COMM, c.STALL_W),
                        ("data_wait", phases.COMM, c.STALL_W), ("checkpoint", phases.CKPT, c.CKPT_W)):
        sel = cap.kind == name
        if sel.any():
            m = cap.inside(mid, cap.st[sel], cap.se[sel])
            kind[m], level[m] = k, lv
    start = (edges[:-1] - t0) / 1e9
    # the power of a prefill shows after its onset delay: shift prefill segments' starts
    start = np.where(kind == phases.PREFILL, start + c.PREFILL_ONSET_S, start)
    order = np.argsort(start, kind="stable")
    return phases.Timeline(np.concatenate([[-1e9], start[order]]), np.concatenate([[phases.IDLE], kind[order]]).astype(np.uint8),
                           np.concatenate([[c.IDLE_W], level[order]]).astype(np.float32))


def sampled_at_buffer(cap: Capture, tl: phases.Timeline, t0: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    _, w = power._instant_w(rng, tl, (cap.bt - t0) / 1e9, 1.0, calibration.POWER_QUANTUM_W)
    return w


def engine_replay(cap: Capture, seed: int = 0):
    """Capture 4's arrivals and token counts through the engine on one GPU (in arrival order)."""
    t0 = int(cap.arrival.min())
    o = np.argsort(cap.arrival, kind="stable")
    arr = Arrivals((cap.arrival[o] - t0) / 1e9, cap.prompt[o].astype(np.int32), cap.output[o].astype(np.int32))
    res = run_engine(np.random.default_rng(seed), arr, 1, errors=False)
    return res, t0


def replay(arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray, batching: str = "continuous",
           model: physics.ServingModel | None = None, n_gpus: int = 1, seed: int = 0):
    """A measured run's arrivals and token counts through the engine (every request completes)."""
    o = np.argsort(arrival_s, kind="stable")
    t0 = float(arrival_s[o][0])
    arr = Arrivals(np.asarray(arrival_s, float)[o] - t0, np.asarray(prompt)[o].astype(np.int32), np.asarray(output)[o].astype(np.int32))
    return run_engine(np.random.default_rng(seed), arr, n_gpus, errors=False, model=model, batching=batching)


def simulated_j_per_token(res, gpu: physics.GpuPower = physics.REFERENCE.gpu, seed: int = 0) -> tuple[float, float]:
    """(J per prompt token, J per output token) of an engine result, its power sampled every 20 ms (the
    driver buffer's spacing) and summed over the GPUs of a replica (one replica)."""
    t = np.arange(float(res.prefill_start_s.min()) - 1.0, float(res.end_s.max()) + 1.0, 0.02)
    _, w = power._instant_w(np.random.default_rng(seed), res.timeline, t, 1.0, calibration.POWER_QUANTUM_W, gpu)
    jp, jo = calibration.joules_per_token(t, w, res.prefill_start_s, res.first_token_s, res.end_s,
                                          res.prompt_tokens, res.output_tokens)
    return jp * res.gpus_per_replica, jo * res.gpus_per_replica


A100 = ("NVIDIA A100-SXM4-80GB", 400.0)
QWEN3_8B_PARAMS_B = 8.2
"""Qwen3-8B: 8.2 B parameters (its model card), bf16."""
SMOKE_RUN = "vllm-a100-smoke/run-1784415083"
"""The smoke run without prefix caching (the other one serves 3 of its 4 prompts mostly from cache)."""
SMOKE_TZ = dt.timezone(dt.timedelta(hours=-7))
"""The smoke runs' power.csv stamps local wall time of a UTC−7 zone (shared/data/README.md)."""


def smoke_run(root: Path) -> dict[str, np.ndarray]:
    """The A100 smoke run: nvidia-smi's instantaneous power (~250 ms) and the benchmark's requests."""
    with open(root / "power.csv") as fh:
        rows = list(csv.reader(fh))[1:]
    t = np.array([dt.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=SMOKE_TZ).timestamp() for r in rows])
    req = json.loads((root / "requests.json").read_text())
    a, ttft, itl = (np.array(req[k], float) for k in ("request_timestamps", "ttfts", "itls"))
    prompt, output = np.array(req["input_lens"]), np.array(req["output_lens"])
    first = a + ttft
    return {"t": t, "w": np.array([float(r[3]) for r in rows]), "arrival": a, "prefill_start": a, "first": first,
            "end": first + itl * (output - 1), "prompt": prompt, "output": output}


def fit_vllm(s: dict[str, np.ndarray]) -> dict[str, float]:
    """vLLM's two parameters from the A100 smoke run (one request decoding at a time): the fixed cost per
    step (the measured time per output token less the bytes the step moves at the A100's bandwidth × the
    shared decode efficiency) and decode's energy per byte moved (the median power outside prefills, less
    loaded and the small compute term, over the bytes per second the steps move)."""
    gpu = physics.GpuPower.of(*A100, None)
    steps = s["output"] - 1
    step_s = float(np.sum(s["end"] - s["first"]) / np.sum(steps))
    context = float(np.sum((s["prompt"] + s["output"] / 2) * steps) / np.sum(steps))
    model = physics.ServingModel(gpu, QWEN3_8B_PARAMS_B, QWEN3_8B_PARAMS_B, context_tokens=context, engine=physics.VLLM)
    move, _ = model.decode_parts_s(1)
    pre = calibration._inside(s["t"], s["prefill_start"], s["first"])
    dec = calibration._inside(s["t"], s["first"], s["end"]) & ~pre
    power_w = float(np.median(s["w"][dec]))
    mem, compute = model.decode_utilisation(1, step_s)
    spec = gpu.spec
    j_per_byte = ((power_w - gpu.map_w(calibration.LOADED_W)
                   - (spec.tdp_w - spec.idle_w) * physics.COMPUTE_W_PER_UTILISATION * compute) / (mem * spec.mem_bytes_s))
    return {"vllm_step_s_measured": step_s, "vllm_context_tokens": context, "vllm_bytes_s": move,
            "vllm_step_overhead_s": step_s - move, "vllm_decode_w_measured": power_w,
            "vllm_bandwidth_utilisation": mem, "vllm_compute_utilisation": compute,
            "decode_pj_per_byte": j_per_byte * 1e12}


def published_points(seed: int = 0) -> dict[str, float]:
    """The simulator at the published points' settings: J per output token as those measurements count it,
    all the replica's GPUs over the whole run (prefill and decode) per output token.

    ML.ENERGY v3: Llama 3.1 8B on one H100 at batch 64 (here 64 requests at once with 512-token prompts
    and outputs, continuous batching, engine vllm; and through the capture's engine for contrast). From
    Words to Watts: LLaMA 65B sharded over 8 A100s (here tp 8, one static batch of 64 requests with
    128-token prompts and 256-token outputs: the paper ran Meta's reference generation loop, which
    batches statically; the lengths are assumed)."""
    out = {}
    n = np.zeros(64)
    h100 = physics.GpuPower.of("NVIDIA H100 80GB HBM3", None, None)
    for key, gpu, params, tp, prompt, output, batching, engine in (
        ("mlenergy_8b_h100_batch64", h100, 8.0, 1, 512, 512, "continuous", "vllm"),
        ("mlenergy_8b_h100_batch64_capture_engine", h100, 8.0, 1, 512, 512, "continuous", None),
        ("words_to_watts_65b_8xa100", physics.GpuPower.of(*A100, None), 65.0, 8, 128, 256, "static", None),
    ):
        m = physics.serving_model({"params_b": params, "tp": tp, "engine": engine}, tp, gpu, float(prompt), float(output))
        res = replay(n, np.full(64, prompt), np.full(64, output), batching, m, tp, seed)
        jp, jo = simulated_j_per_token(res, gpu, seed)
        out[f"{key}_j_per_output_token"] = (jp * res.prompt_tokens.sum() + jo * res.output_tokens.sum()) / res.output_tokens.sum()
        out[f"{key}_decode_j_per_output_token"] = jo
    return out


def energy_table(data: Path, fit_cap: Capture, val_cap: Capture, seed: int = 0) -> list[dict]:
    """Measured vs simulated J per prompt and per output token: capture 4 (fit), capture 2 (validate,
    static batching), the A100 smoke run (the vLLM engine's fit; and through the capture's engine, the
    default, for contrast)."""
    rows = []
    for cap, batching, role in ((fit_cap, "continuous", "fit"), (val_cap, "static", "validate")):
        measured = calibration.joules_per_token(cap.bt / 1e9, cap.bw, cap.ps / 1e9, cap.ft / 1e9, cap.end / 1e9, cap.prompt, cap.output)
        res = replay(cap.arrival / 1e9, cap.prompt, cap.output, batching, seed=seed)
        rows.append({"run": cap.name, "role": role, "batching": batching, "measured": measured,
                     "simulated": simulated_j_per_token(res, seed=seed)})
    s = smoke_run(data / SMOKE_RUN)
    measured = calibration.joules_per_token(s["t"], s["w"], s["prefill_start"], s["first"], s["end"], s["prompt"], s["output"])
    gpu = physics.GpuPower.of(*A100, None)
    for engine, role in (("vllm", "fit (vllm)"), (None, "check (capture engine)")):
        model = physics.serving_model({"params_b": QWEN3_8B_PARAMS_B, "tp": 1, "engine": engine}, 1, gpu,
                                      float(np.median(s["prompt"])), float(np.median(s["output"])))
        res = replay(s["arrival"], s["prompt"], s["output"], "continuous", model, seed=seed)
        rows.append({"run": SMOKE_RUN, "role": role, "batching": "continuous", "measured": measured,
                     "simulated": simulated_j_per_token(res, gpu, seed)})
    return rows


H100_RUN = "vllm-h100-qwen3-8b"
"""Qwen3-8B on one 700 W H100, vLLM 0.10.1 with chunked prefill, 200 ShareGPT requests at 4 req/s."""
H100_RPS = 4.0
"""The benchmark's request rate (manifest.json: ``--request-rate 4.0``, Poisson; 200 requests)."""


def h100_check(root: Path, seed: int = 0) -> dict[str, float]:
    """The vLLM engine against the H100 run, which no parameter was fitted on: measured engine steps per
    second, output tokens per second, running requests and the 1 s average power while serving (engine.csv's
    counters, power.csv), against the simulator at the run's mean running count and context, and
    simulated runs of its 200 requests at its request rate (4 req/s) with its mean prompt and output
    lengths (Poisson arrivals, the mean over five seeds: the run's per-request files are not kept). J per
    output token: all the GPU's energy while requests run over the output tokens, on both sides."""
    eng = _csv(root / "engine.csv")
    t = eng["timestamp"].astype(float)
    run = eng["num_requests_running"].astype(float)
    gen = eng["generation_tokens_total"].astype(float)
    steps = eng["iteration_tokens_total_count"].astype(float)
    prompt_total = eng["prompt_tokens_total"].astype(float)
    busy = np.flatnonzero(run > 0)
    lo, hi = int(busy[0]), int(busy[-1]) + 1
    span_s = t[hi] - t[lo]
    with open(root / "power.csv") as fh:
        rows = list(csv.reader(fh))[1:]
    pt = np.array([dt.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=SMOKE_TZ).timestamp() for r in rows])
    pw = np.array([float(r[3]) for r in rows])
    serving = (pt >= t[lo]) & (pt < t[hi])
    n_req = 200
    mean_prompt = (prompt_total[hi] - prompt_total[lo]) / n_req
    mean_output = (gen[hi] - gen[lo]) / n_req
    mean_running = float(np.mean(run[lo:hi]))
    measured = {"steps_per_s": (steps[hi] - steps[lo]) / span_s, "output_tokens_per_s": (gen[hi] - gen[lo]) / span_s,
                "running": mean_running, "power_w": float(np.mean(pw[serving])),
                "j_per_output_token": float(np.mean(pw[serving]) * span_s / (gen[hi] - gen[lo]))}
    gpu = physics.GpuPower.of("NVIDIA H100 80GB HBM3", None, None)
    model = physics.ServingModel(gpu, QWEN3_8B_PARAMS_B, QWEN3_8B_PARAMS_B, context_tokens=mean_prompt + mean_output / 2,
                                 engine=physics.VLLM)
    step = model.decode_step_s(mean_running)
    steady = {"steps_per_s": 1.0 / step, "output_tokens_per_s": mean_running / step,
              "power_w": model.decode_power_w(mean_running)}
    m = physics.serving_model({"params_b": QWEN3_8B_PARAMS_B, "tp": 1, "engine": "vllm"}, 1, gpu, mean_prompt, mean_output)
    runs = []
    for k in range(5):
        rng = np.random.default_rng(seed + k)
        arrival = np.cumsum(rng.exponential(1 / H100_RPS, n_req))
        res = replay(arrival, np.full(n_req, round(mean_prompt)), np.full(n_req, round(mean_output)), "continuous", m, 1, seed + k)
        ts = np.arange(float(res.prefill_start_s.min()), float(res.end_s.max()), 0.02)
        _, w = power._instant_w(np.random.default_rng(seed + k), res.timeline, ts, 1.0, calibration.POWER_QUANTUM_W, gpu)
        out_tokens, run_s = float(res.output_tokens.sum()), float(ts[-1] - ts[0])
        runs.append((out_tokens / run_s, float(np.mean(w)), float(np.mean(w)) * run_s / out_tokens))
    simulated = dict(zip(("output_tokens_per_s", "power_w", "j_per_output_token"), np.mean(runs, axis=0).tolist(), strict=True))
    return {"measured": measured, "simulated_steady": steady, "simulated_run": simulated,
            "mean_prompt": mean_prompt, "mean_output": mean_output}


def _hist_png(path: Path, title: str, series: dict[str, np.ndarray], unit: str, bins: np.ndarray) -> None:
    import altair as alt
    import vl_convert as vlc

    rows = []
    for name, x in series.items():
        h, e = np.histogram(x, bins=bins)
        rows += [{"x": float((e[i] + e[i + 1]) / 2), "share": float(h[i] / max(len(x), 1)), "series": name} for i in range(len(h))]
    chart = alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step").encode(
        x=alt.X("x:Q", title=unit), y=alt.Y("share:Q", title="share of samples"), color=alt.Color("series:N", title=None),
    ).properties(title=title, width=460, height=220)
    path.write_bytes(vlc.vegalite_to_png(chart.to_json(), scale=1.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    near = [d / "shared" / "data" for d in (REPO.parent, REPO.parent.parent)]  # a clone, or a worktree of one
    ap.add_argument("--data", type=Path, default=next((d for d in near if d.is_dir()), near[0]))
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = ap.parse_args()
    fit_cap, val_cap = Capture(args.data / "h200-capture-4"), Capture(args.data / "h200-capture-2")
    fitted = fit(fit_cap)
    print("fitted on", fit_cap.name)
    print(json.dumps({k: round(v, 6) for k, v in fitted.items()}, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}

    # 1. power, out of sample: capture 2's logged workload through the fitted power model
    t0 = val_cap.marks["infer"] - 8_000_000_000
    sim_w = sampled_at_buffer(val_cap, logged_timeline(val_cap, t0), t0)
    for name, sel in (("inference", val_cap.serving()),
                      ("training", (val_cap.bt > val_cap.marks["train"]) & (val_cap.bt < val_cap.marks["idle2"]))):
        ks = ks_statistic(val_cap.bw[sel], sim_w[sel])
        results[f"power_{name}_capture2_ks"] = ks
        _hist_png(args.out / f"calib-power-{name}-capture2.png",
                  f"{name} power, capture 2 (validation) vs simulator: KS {ks:.2f}",
                  {"capture 2 driver buffer": val_cap.bw[sel], "simulator on capture 2's logged workload": sim_w[sel]},
                  "W", np.arange(60, 960, 20))

    # 2. prefill durations, out of sample: capture 2's padded batches vs the fitted model
    ps, pe, tokens = val_cap.prefills()
    real_d = (pe - ps) / 1e9
    model_d = calibration.PREFILL_OVERHEAD_S + calibration.PREFILL_S_PER_TOKEN * tokens
    results["prefill_duration_capture2_ks"] = ks_statistic(real_d, model_d)
    results["prefill_duration_capture2_ratio_median"] = float(np.median(model_d / real_d))

    # 3. in sample: capture 4's arrivals through the engine (1 GPU) and the power model
    res, t0 = engine_replay(fit_cap)
    sim_d = res.first_token_s - res.prefill_start_s
    real_d4 = (fit_cap.ft - fit_cap.ps) / 1e9
    ks = ks_statistic(real_d4, sim_d)
    results["prefill_duration_capture4_engine_ks"] = ks
    _hist_png(args.out / "calib-prefill-duration.png", f"prefill duration: capture 4 vs engine replay (KS {ks:.2f}); "
              f"capture 2 batches vs model (KS {results['prefill_duration_capture2_ks']:.2f})",
              {"capture 4 (fit)": real_d4, "engine replaying capture 4's arrivals": sim_d,
               "capture 2 padded batches (validation)": real_d, "model for capture 2's batches": model_d},
              "s", np.arange(0.0, 1.0, 0.02))
    sel = fit_cap.serving()
    sim_w4 = sampled_at_buffer(fit_cap, res.timeline, t0)
    ks = ks_statistic(fit_cap.bw[sel], sim_w4[sel])
    results["power_inference_capture4_engine_ks"] = ks
    _hist_png(args.out / "calib-power-inference-capture4.png", f"inference power, capture 4 vs engine replay (in sample): KS {ks:.2f}",
              {"capture 4 driver buffer": fit_cap.bw[sel], "engine replaying capture 4's arrivals": sim_w4[sel]},
              "W", np.arange(60, 960, 20))
    print(json.dumps({k: round(v, 3) for k, v in results.items()}, indent=1))

    # 4. energy per token: measured vs simulated, then published points
    print("run | role | batching | measured J/prompt token | simulated | gap | measured J/output token | simulated | gap")
    for r in energy_table(args.data, fit_cap, val_cap):
        (mp, mo), (sp, so) = r["measured"], r["simulated"]
        print(f"{r['run']} | {r['role']} | {r['batching']} | {mp:.4f} | {sp:.4f} | {sp / mp - 1:+.0%} | {mo:.3f} | {so:.3f} | {so / mo - 1:+.0%}")
    print(json.dumps({k: round(v, 4) for k, v in published_points().items()}, indent=1))
    print("vllm fit on", SMOKE_RUN, json.dumps({k: round(v, 6) for k, v in fit_vllm(smoke_run(args.data / SMOKE_RUN)).items()}, indent=1))
    print(H100_RUN, "(check)", json.dumps(h100_check(args.data / H100_RUN), indent=1, default=float))


if __name__ == "__main__":
    main()
