"""Record raw NVML power captures of LLM inference on one real GPU, with the workload's own phase log.

    python3 bench/h200_capture.py --out OUTDIR --plan smoke|full [--gpu 0] [--probe 1.5b 34b]

Same files and columns as ``h200-capture-2`` / ``-4`` in the shared data folder, one folder per capture:
``power_samples.csv`` (a sampler process polling NVML about every 10 ms), ``driver_buffer.csv`` (the
driver's power buffer, ``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)``, drained once a second),
``requests.csv`` (arrival, prefill start, first token and end per request: Unix ns, host wall clock; prefill
start and first token are taken with a device synchronize on both sides), ``phases.txt``, ``gpu_meta.csv``
and ``capture.json`` (model shape, workload, seeds).

The model is a Llama-shaped decoder (RMSNorm, rotary attention with grouped KV heads, SwiGLU MLP) with
random bf16 weights created on the GPU: nothing is downloaded. Two servers:
- static batching: when the GPU is free, every waiting request (up to ``max_batch``) is prefilled together,
  padded to the longest prompt, then decoded together until the longest output is done;
- continuous batching: each arriving request is prefilled alone, in its own forward pass, between the decode
  steps of the requests already running (as vLLM does without chunked prefill).
Arrivals are Poisson; prompt and output lengths lognormal (like capture 4's). Only reads GPU settings.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing as mp
import os
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FIELD_POWER_AVERAGE = 185
FIELD_POWER_INSTANT = 186
FIELD_TOTAL_ENERGY = 83
TOTAL_POWER_SAMPLES = 0  # NVML_TOTAL_POWER_SAMPLES
POLL_S = 0.010
DRAIN_S = 1.0
SAMPLE_COLS = ["t_ns", "gpu", "power_usage_mw", "power_instant_mw", "power_instant_ts_us", "power_average_mw", "power_average_ts_us",
               "energy_mj_field", "total_energy_mj", "util_gpu_pct", "util_mem_pct", "sm_clock_mhz", "mem_used_mib", "temp_c", "call_us"]


# -- the sampler (own process, so the serving loop's GIL never delays a poll) --------------------------------------
def _field(fv) -> int | None:
    if fv.nvmlReturn != 0:
        return None
    vt = fv.valueType
    v = fv.value
    return {0: v.dVal, 1: v.uiVal, 2: v.ulVal, 3: v.ullVal, 4: v.sllVal, 5: v.siVal}.get(vt, v.uiVal)


def sampler(gpu: int, out_dir: str, stop, ready) -> None:
    """Poll NVML every ~10 ms into power_samples.csv; drain the driver buffer every second into driver_buffer.csv.
    The energy readings cost ~3 ms each, so they are read once a second (empty in other rows)."""
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(gpu)
    last_buf_us = 0
    with open(Path(out_dir) / "power_samples.csv", "w", newline="") as fs, open(Path(out_dir) / "driver_buffer.csv", "w", newline="") as fb:
        ws, wb = csv.writer(fs), csv.writer(fb)
        ws.writerow(SAMPLE_COLS)
        wb.writerow(["gpu", "driver_ts_us", "power_mw"])

        def drain() -> None:
            nonlocal last_buf_us
            try:
                vtype, samples = nv.nvmlDeviceGetSamples(h, TOTAL_POWER_SAMPLES, last_buf_us)
            except nv.NVMLError:
                return
            for s in sorted(samples, key=lambda s: s.timeStamp):
                if s.timeStamp > last_buf_us:
                    wb.writerow([gpu, s.timeStamp, s.sampleValue.uiVal])
                    last_buf_us = s.timeStamp

        drain()
        ready.set()
        next_drain = time.monotonic() + DRAIN_S
        next_energy = 0.0
        nxt = time.monotonic()
        while not stop.is_set():
            c0 = time.perf_counter()
            t_ns = time.time_ns()
            now = time.monotonic()
            try:
                usage = nv.nvmlDeviceGetPowerUsage(h)
                fv = nv.nvmlDeviceGetFieldValues(h, [FIELD_POWER_INSTANT, FIELD_POWER_AVERAGE])
                e_field = e_total = ""
                if now >= next_energy:
                    next_energy = now + 1.0
                    e_field = _field(nv.nvmlDeviceGetFieldValues(h, [FIELD_TOTAL_ENERGY])[0])
                    e_total = nv.nvmlDeviceGetTotalEnergyConsumption(h)
                ut = nv.nvmlDeviceGetUtilizationRates(h)
                row = [t_ns, gpu, usage, _field(fv[0]), fv[0].timestamp, _field(fv[1]), fv[1].timestamp, e_field, e_total, ut.gpu, ut.memory,
                       nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM), nv.nvmlDeviceGetMemoryInfo(h).used >> 20,
                       nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), int((time.perf_counter() - c0) * 1e6)]
                ws.writerow(row)
            except nv.NVMLError as exc:  # a failed poll is a missing row, not the end of the capture
                print("sampler:", exc, flush=True)
            if now >= next_drain:
                next_drain += DRAIN_S
                drain()
            nxt += POLL_S
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            else:
                nxt = time.monotonic()
        drain()
    nv.nvmlShutdown()


def gpu_meta(gpu: int) -> dict:
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(gpu)
    meta = {"gpu": gpu, "name": nv.nvmlDeviceGetName(h), "uuid": nv.nvmlDeviceGetUUID(h),
            "enforced_limit_mw": nv.nvmlDeviceGetEnforcedPowerLimit(h), "default_limit_mw": nv.nvmlDeviceGetPowerManagementDefaultLimit(h),
            "driver": nv.nvmlSystemGetDriverVersion()}
    nv.nvmlShutdown()
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in meta.items()}


# -- the model ------------------------------------------------------------------------------------------------------
@dataclass
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 32000

    @property
    def params(self) -> int:
        hd = self.hidden // self.heads
        attn = self.hidden * (self.heads * hd + 2 * self.kv_heads * hd) + self.heads * hd * self.hidden
        return self.layers * (attn + 3 * self.hidden * self.intermediate + 2 * self.hidden) + 2 * self.vocab * self.hidden + self.hidden


SHAPES = {
    "tiny": Shape("tiny", 512, 4, 8, 2, 1536),
    "1.5b": Shape("1.5b", 2048, 22, 16, 8, 8192),  # TinyLlama-like depth, 1.5 B parameters
    "13b": Shape("13b", 5120, 40, 40, 8, 13824),   # Llama-2-13B's width and depth with grouped KV heads, 11.4 B parameters
    "34b": Shape("34b", 8192, 48, 64, 8, 22016),   # CodeLlama-34B's shape, 33.7 B parameters
}


class Decoder:
    """Llama-shaped decoder, random weights (std 1/sqrt(fan-in)); a KV cache of ``slots`` rows × ``max_len``."""

    def __init__(self, s: Shape, slots: int, max_len: int, dev) -> None:
        import torch

        self.s, self.dev = s, dev
        self.hd = s.hidden // s.heads
        bf = torch.bfloat16

        def w(*shape):
            return torch.empty(*shape, device=dev, dtype=bf).normal_(0.0, 1.0 / math.sqrt(shape[-1]))

        self.embed = w(s.vocab, s.hidden)
        self.lm_head = w(s.vocab, s.hidden)
        self.layers = []
        for _ in range(s.layers):
            self.layers.append({
                "qkv": w(s.heads * self.hd + 2 * s.kv_heads * self.hd, s.hidden),
                "o": w(s.hidden, s.heads * self.hd),
                "gate_up": w(2 * s.intermediate, s.hidden),
                "down": w(s.hidden, s.intermediate),
                "n1": torch.ones(s.hidden, device=dev, dtype=bf), "n2": torch.ones(s.hidden, device=dev, dtype=bf),
            })
        self.norm = torch.ones(s.hidden, device=dev, dtype=bf)
        inv = 1.0 / (10000.0 ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float32) / self.hd))
        ang = torch.outer(torch.arange(max_len, device=dev, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(bf), ang.sin().to(bf)
        self.k = [torch.zeros(slots, s.kv_heads, max_len, self.hd, device=dev, dtype=bf) for _ in range(s.layers)]
        self.v = [torch.zeros_like(self.k[0]) for _ in range(s.layers)]
        self.max_len = max_len

    @staticmethod
    def _rms(x, g):
        import torch

        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * g

    def _rope(self, x, pos):
        """x [B, H, T, hd]; pos [B, T] (int64)."""
        c, s = self.cos[pos][:, None], self.sin[pos][:, None]
        x1, x2 = x[..., ::2], x[..., 1::2]
        import torch

        return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)

    def _qkv(self, lay, h, pos):
        B, T, _ = h.shape
        s, hd = self.s, self.hd
        qkv = h @ lay["qkv"].T
        q, k, v = qkv.split([s.heads * hd, s.kv_heads * hd, s.kv_heads * hd], dim=-1)
        q = self._rope(q.view(B, T, s.heads, hd).transpose(1, 2), pos)
        k = self._rope(k.view(B, T, s.kv_heads, hd).transpose(1, 2), pos)
        return q, k, v.view(B, T, s.kv_heads, hd).transpose(1, 2)

    def _mlp(self, lay, x):
        import torch.nn.functional as F

        g, u = (self._rms(x, lay["n2"]) @ lay["gate_up"].T).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ lay["down"].T

    def prefill(self, tokens, slot0: int):
        """tokens [B, T] into cache rows slot0..slot0+B-1 at positions 0..T-1; returns next tokens [B]."""
        import torch
        import torch.nn.functional as F

        B, T = tokens.shape
        pos = torch.arange(T, device=self.dev).expand(B, T)
        x = self.embed[tokens]
        for i, lay in enumerate(self.layers):
            q, k, v = self._qkv(lay, self._rms(x, lay["n1"]), pos)
            self.k[i][slot0:slot0 + B, :, :T] = k
            self.v[i][slot0:slot0 + B, :, :T] = v
            g = self.s.heads // self.s.kv_heads
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), is_causal=True)
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ lay["o"].T
            x = self._mlp(lay, x)
        return (self._rms(x[:, -1], self.norm) @ self.lm_head.T).argmax(-1)

    def decode(self, tokens, lens, n_rows: int, span: int):
        """One token for cache rows 0..n_rows-1; row r attends to positions < lens[r]+1, writes at lens[r].
        ``span`` ≥ max(lens)+1 bounds the attention window."""
        import torch
        import torch.nn.functional as F

        s, hd = self.s, self.hd
        g = s.heads // s.kv_heads
        rows = torch.arange(n_rows, device=self.dev)
        pos = lens[:, None]
        x = self.embed[tokens][:, None]
        # plain matmuls, no fused attention: a fused kernel specialised per shape (cuDNN's) rebuilds
        # its plan whenever the window grows, ~50 ms a step
        masked = (torch.arange(span, device=self.dev)[None, :] > lens[:, None])[:, None, None, :]
        for i, lay in enumerate(self.layers):
            q, k, v = self._qkv(lay, self._rms(x, lay["n1"]), pos)
            self.k[i][rows, :, lens] = k[:, :, 0]
            self.v[i][rows, :, lens] = v[:, :, 0]
            kc, vc = self.k[i][:n_rows, :, :span], self.v[i][:n_rows, :, :span]
            sc = (q.view(n_rows, s.kv_heads, g, hd) @ kc.transpose(-1, -2)).float() * (hd ** -0.5)
            pr = F.softmax(sc.masked_fill(masked, float("-inf")), dim=-1).to(vc.dtype)
            a = (pr @ vc).reshape(n_rows, 1, s.heads * hd)
            x = x + a @ lay["o"].T
            x = self._mlp(lay, x)
        return (self._rms(x[:, -1], self.norm) @ self.lm_head.T).argmax(-1)


# -- the workload ---------------------------------------------------------------------------------------------------
@dataclass
class Plan:
    name: str
    shape: str
    mode: str  # "static" or "continuous"
    rate_per_s: float
    infer_s: float
    idle_s: float
    slots: int
    prompt_median: int = 1500
    prompt_sigma: float = 0.6
    prompt_max: int = 6144
    output_median: int = 150
    output_sigma: float = 0.8
    output_max: int = 768
    drain_cap_s: float = 30.0
    seed: int = 0


def make_requests(p: Plan) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(p.seed)
    t, out = 0.0, []
    while True:
        t += rng.exponential(1.0 / p.rate_per_s)
        if t >= p.infer_s:
            break
        pt = int(np.clip(round(rng.lognormal(math.log(p.prompt_median), p.prompt_sigma)), 16, p.prompt_max))
        ot = int(np.clip(round(rng.lognormal(math.log(p.output_median), p.output_sigma)), 4, p.output_max))
        out.append({"request_id": len(out), "offset_s": t, "prompt_tokens": pt, "output_tokens": ot})
    return out


def now_sync() -> int:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.time_ns()


def serve_static(m: Decoder, p: Plan, reqs: list[dict], t0: int) -> list[dict]:
    """Whenever the GPU is free, take every waiting request (≤ slots), prefill them together, decode to the longest."""
    import torch

    pending, done, batch_id = list(reqs), [], 0
    deadline = t0 + int((p.infer_s + p.drain_cap_s) * 1e9)
    while pending and time.time_ns() < deadline:
        now = time.time_ns()
        ready = [r for r in pending if t0 + int(r["offset_s"] * 1e9) <= now][: p.slots]
        if not ready:
            time.sleep(max(0.0, min(0.002, (t0 + int(pending[0]["offset_s"] * 1e9) - now) / 1e9)))
            continue
        for r in ready:
            pending.remove(r)
        B, T = len(ready), max(r["prompt_tokens"] for r in ready)
        tok = torch.randint(0, m.s.vocab, (B, T), device=m.dev)
        start = now_sync()
        nxt = m.prefill(tok, 0)
        first = now_sync()
        lens = torch.full((B,), T, device=m.dev, dtype=torch.long)
        ends = {}
        for r in ready:
            if r["output_tokens"] <= 1:
                ends[r["request_id"]] = first
        steps = max(r["output_tokens"] for r in ready) - 1
        for k in range(steps):
            nxt = m.decode(nxt, lens, B, T + k + 1)
            lens += 1
            t = now_sync()
            for r in ready:
                if r["output_tokens"] - 1 == k + 1:
                    ends[r["request_id"]] = t
        for r in ready:
            done.append({**r, "batch_id": batch_id, "batch_size": B, "prefill_start_ns": start, "first_token_ns": first,
                         "end_ns": ends[r["request_id"]]})
        batch_id += 1
    return done


def serve_continuous(m: Decoder, p: Plan, reqs: list[dict], t0: int) -> list[dict]:
    """Each arrival is prefilled alone between decode steps of the running requests; a request leaves when done."""
    import torch

    pending, done = list(reqs), []
    free = list(range(p.slots))
    running: dict[int, dict] = {}  # slot → request state
    deadline = t0 + int((p.infer_s + p.drain_cap_s) * 1e9)
    lens = torch.zeros(p.slots, device=m.dev, dtype=torch.long)
    active = torch.zeros(p.slots, device=m.dev, dtype=torch.long)  # 1 where a request runs; free rows stay at position 0
    toks = torch.zeros(p.slots, device=m.dev, dtype=torch.long)
    while (pending or running) and time.time_ns() < deadline:
        now = time.time_ns()
        while pending and free and t0 + int(pending[0]["offset_s"] * 1e9) <= now:
            r = pending.pop(0)
            slot = min(free)
            free.remove(slot)
            tok = torch.randint(0, m.s.vocab, (1, r["prompt_tokens"]), device=m.dev)
            start = now_sync()
            toks[slot] = m.prefill(tok, slot)[0]
            first = now_sync()
            st = {**r, "batch_id": r["request_id"], "batch_size": len(running) + 1, "prefill_start_ns": start, "first_token_ns": first,
                  "left": r["output_tokens"] - 1, "len": r["prompt_tokens"]}
            if st["left"] <= 0:
                done.append({**st, "end_ns": first})
                free.append(slot)
            else:
                running[slot] = st
                lens[slot] = r["prompt_tokens"]
                active[slot] = 1
            now = time.time_ns()
        if not running:
            if pending:
                time.sleep(max(0.0, min(0.002, (t0 + int(pending[0]["offset_s"] * 1e9) - time.time_ns()) / 1e9)))
            continue
        n_rows = max(running) + 1
        span = max(st["len"] for st in running.values()) + 1
        toks[:n_rows] = m.decode(toks[:n_rows], lens[:n_rows], n_rows, span)
        lens[:n_rows] += active[:n_rows]
        t = now_sync()
        for slot in list(running):
            st = running[slot]
            st["left"] -= 1
            st["len"] += 1
            if st["left"] <= 0:
                done.append({**st, "end_ns": t})
                del running[slot]
                free.append(slot)
                lens[slot] = 0
                active[slot] = 0
    return done


def warm_up(m: Decoder, slots: int) -> None:
    import torch

    for T in (64, 512, 2048):
        nxt = m.prefill(torch.randint(0, m.s.vocab, (1, min(T, m.max_len // 2)), device=m.dev), 0)
    at = min(600, m.max_len // 2)
    lens = torch.full((slots,), at, device=m.dev, dtype=torch.long)
    for _ in range(5):
        m.decode(nxt.expand(slots).contiguous(), lens, slots, at + 1)
    now_sync()


def idle(seconds: float) -> None:
    time.sleep(seconds)


def run_capture(m: Decoder, p: Plan, cap_dir: Path, marks: list) -> dict:
    reqs = make_requests(p)
    warm_up(m, min(p.slots, 8))
    ph = {"idle0": time.time_ns()}
    idle(p.idle_s)
    ph["infer"] = t0 = time.time_ns()
    serve = serve_static if p.mode == "static" else serve_continuous
    done = serve(m, p, reqs, t0)
    ph["idle1"] = now_sync()
    idle(p.idle_s)
    ph["end"] = time.time_ns()
    cap_dir.mkdir(parents=True, exist_ok=True)
    with open(cap_dir / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "endpoint", "batch_id", "batch_size", "arrival_ns", "prefill_start_ns", "first_token_ns", "end_ns",
                    "prompt_tokens", "output_tokens"])
        for r in sorted(done, key=lambda r: r["request_id"]):
            w.writerow([r["request_id"], f"llm-{p.shape}-{'sb' if p.mode == 'static' else 'cb'}-0", r["batch_id"], r["batch_size"],
                        t0 + int(r["offset_s"] * 1e9), r["prefill_start_ns"], r["first_token_ns"], r["end_ns"], r["prompt_tokens"], r["output_tokens"]])
    (cap_dir / "phases.txt").write_text("".join(f"{k} {v}\n" for k, v in ph.items()))
    marks.append((p.name, ph["idle0"], ph["end"]))
    busy = sum(r["first_token_ns"] - r["prefill_start_ns"] for r in {r["batch_id"]: r for r in done}.values()) / 1e9
    info = {"plan": asdict(p), "params": m.s.params, "shape": asdict(m.s), "requests_planned": len(reqs), "requests_done": len(done),
            "infer_s": (ph["idle1"] - ph["infer"]) / 1e9, "prefill_busy_s": busy}
    (cap_dir / "capture.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: info[k] for k in ("requests_planned", "requests_done", "infer_s", "prefill_busy_s")} | {"name": p.name}), flush=True)
    return info


PLANS = {
    "smoke": [
        Plan("smoke-tiny-static", "tiny", "static", 4.0, 5.0, 1.0, 8),
        Plan("smoke-tiny-continuous", "tiny", "continuous", 6.0, 5.0, 1.0, 16),
    ],
    "short": [  # what one call can hold when little device time is left: the two sizes, both servers
        Plan("h200-34b-static", "34b", "static", 0.6, 35.0, 3.0, 12, output_max=384, drain_cap_s=15.0, seed=13),
        Plan("h200-34b-continuous", "34b", "continuous", 1.4, 35.0, 3.0, 32, drain_cap_s=10.0, seed=14),
        Plan("h200-1.5b-static", "1.5b", "static", 3.0, 25.0, 3.0, 32, drain_cap_s=10.0, seed=11),
        Plan("h200-1.5b-continuous", "1.5b", "continuous", 8.0, 25.0, 3.0, 64, drain_cap_s=10.0, seed=12),
    ],
    "full": [
        Plan("h200-1.5b-static", "1.5b", "static", 3.0, 60.0, 5.0, 32, seed=11),
        Plan("h200-1.5b-continuous", "1.5b", "continuous", 8.0, 60.0, 5.0, 64, seed=12),
        Plan("h200-34b-static", "34b", "static", 0.35, 75.0, 5.0, 16, seed=13),
        Plan("h200-34b-continuous", "34b", "continuous", 1.4, 75.0, 5.0, 32, seed=14),
        Plan("h200-13b-static", "13b", "static", 0.6, 60.0, 5.0, 16, seed=15),
        Plan("h200-13b-continuous", "13b", "continuous", 2.0, 60.0, 5.0, 32, seed=16),
    ],
}


def probe(shape: str, dev) -> dict:
    """Time one prefill and decode steps of ``shape`` (memory and speed check before a full plan)."""
    import torch

    m = Decoder(SHAPES[shape], 32, 6912, dev)
    out = {"shape": shape, "params": m.s.params, "mem_gib": torch.cuda.memory_allocated() / 2**30}
    warm_up(m, 8)
    for T in (512, 2048, 6144):
        t = now_sync()
        m.prefill(torch.randint(0, m.s.vocab, (1, T), device=dev), 0)
        out[f"prefill_{T}_s"] = (now_sync() - t) / 1e9
    t = now_sync()
    m.prefill(torch.randint(0, m.s.vocab, (8, 4096), device=dev), 0)
    out["prefill_8x4096_s"] = (now_sync() - t) / 1e9
    lens = torch.full((32,), 3000, device=dev, dtype=torch.long)
    tok = torch.zeros(32, device=dev, dtype=torch.long)
    t = now_sync()
    for _ in range(20):
        tok = m.decode(tok, lens, 32, 3100)
    out["decode32_step_s"] = (now_sync() - t) / 20e9
    out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    del m
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--plan", choices=sorted(PLANS), default="smoke")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--work", default="/tmp/h200-capture", help="scratch folder for the raw files and capture folders")
    ap.add_argument("--probe", nargs="*", default=[], help="shapes to time after the plan (prefill, decode step, memory)")
    ap.add_argument("--budget-s", type=float, default=490.0, help="start no capture that would end after this many seconds")
    a = ap.parse_args()
    began = time.monotonic()
    import torch

    dev = torch.device(f"cuda:{a.gpu}")
    torch.cuda.set_device(dev)
    # cuDNN's attention builds a plan per new shape (tens of ms): every prefill length would pay it
    torch.backends.cuda.enable_cudnn_sdp(False)
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    raw = work / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    meta = gpu_meta(a.gpu)
    print(json.dumps(meta), flush=True)
    ctx = mp.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=sampler, args=(a.gpu, str(raw), stop, ready), daemon=True)
    proc.start()
    ready.wait(30)
    marks: list = []
    caps = work / "captures"
    model, model_key = None, None
    try:
        for p in PLANS[a.plan]:
            need = p.infer_s + 2 * p.idle_s + 12
            if time.monotonic() - began + need > a.budget_s:
                print(json.dumps({"skipped": p.name, "elapsed_s": time.monotonic() - began}), flush=True)
                continue
            key = (p.shape, p.slots)
            if model_key != key:
                model = None
                torch.cuda.empty_cache()
                model = Decoder(SHAPES[p.shape], p.slots, p.prompt_max + p.output_max + 1, dev)
                model_key = key
            try:
                run_capture(model, p, caps / p.name, marks)
            except Exception as exc:  # one failed capture (out of memory, say) leaves the others
                print(json.dumps({"failed": p.name, "error": repr(exc)}), flush=True)
                model, model_key = None, None
                torch.cuda.empty_cache()
        model = None
        torch.cuda.empty_cache()
        for s in a.probe:
            print(json.dumps(probe(s, dev)), flush=True)
    finally:
        stop.set()
        proc.join(30)
    split(raw, caps, marks, meta)
    with tarfile.open(out / "captures.tar.gz", "w:gz") as tar:
        tar.add(caps, arcname="captures")
    print("tar bytes", os.path.getsize(out / "captures.tar.gz"), flush=True)


def split(raw: Path, caps: Path, marks: list, meta: dict) -> None:
    """Cut the sampler's files into each capture's [idle0, end] window; write gpu_meta.csv beside them."""
    for fname, tcol, scale in (("power_samples.csv", 0, 1), ("driver_buffer.csv", 1, 1000)):
        with open(raw / fname) as f:
            rows = list(csv.reader(f))
        head, body = rows[0], rows[1:]
        for name, lo, hi in marks:
            with open(caps / name / fname, "w", newline="") as g:
                w = csv.writer(g)
                w.writerow(head)
                w.writerows(r for r in body if lo <= int(r[tcol]) * scale <= hi)
        n = sum(1 for _ in body)
        print(fname, "rows", n, flush=True)
    for name, _, _ in marks:
        with open(caps / name / "gpu_meta.csv", "w", newline="") as g:
            w = csv.DictWriter(g, fieldnames=list(meta))
            w.writeheader()
            w.writerow(meta)


if __name__ == "__main__":
    main()
