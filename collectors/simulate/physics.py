"""Step times and power levels from the model, its sharding and the GPU it runs on.

A roofline with the capture's overheads: prefill is compute-bound (≈ 2 × active parameters × tokens,
plus causal attention, over tp × the GPU's peak × ``PREFILL_EFFICIENCY``), decode is memory-bound
(weights / tp + the running requests' KV cache over bandwidth × ``DECODE_EFFICIENCY``) plus the
engine's fixed costs, plus tensor-parallel all-reduces. Both efficiencies and the fixed costs of the
default engine (``CAPTURE``: a plain PyTorch loop, a large fixed cost per layer) are fitted so that an 8B
bf16 decoder on one H200 reproduces ``h200-capture-4`` (calibration.py), the configuration every endpoint
without model keys keeps. An endpoint with ``engine: vllm`` (``VLLM``: CUDA graphs, fused kernels) pays
only a small fixed cost per step, fitted on the vLLM A100 smoke run.

Power is a level per phase from what the GPU is doing, placed in the GPU's own range (idle → TDP,
:mod:`collectors.gpu_specs`): compute-bound prefill and training steps at the capture's share of it (a
little above TDP), memory-bound decode in proportion to the share of the step the GPU spends moving
bytes (the capture's engine), or, for an engine fitted on its own power (vLLM), from the step's bytes
per second (an energy per byte) and tensor-core utilisation (a share of the GPU's range). Under an
enforced limit below TDP the clocks fall until the phase's power fits the limit (dynamic power ∝
clock^``CLOCK_POWER_EXPONENT``): compute-bound phases take 1 / clock longer, memory-bound ones barely
(1 / clock^``MEMORY_CLOCK_SENSITIVITY``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collectors.gpu_specs import DEFAULT, GpuSpec, spec_for
from collectors.simulate import calibration

BYTES_PER_PARAM = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "mxfp8": 1.0, "int8": 1.0,
                   "fp6": 0.75, "mxfp6": 0.75, "fp4": 0.5, "mxfp4": 0.5, "nvfp4": 0.5, "int4": 0.5}
DEFAULT_PARAMS_B = 8.0
DEFAULT_PRECISION = "bf16"

REF_LAYERS = 32
REF_WIDTH = 4096
"""Llama-3-8B's shape (32 layers of width 4,096, 8 KV heads of 128): the capture's model."""
REF_KV_BYTES_PER_TOKEN = 2 * 8 * 128 * REF_LAYERS * 2
"""K and V, 8 KV heads × 128, 32 layers, bf16: 131 kB per token of context."""
REF_CONTEXT_TOKENS = 2234.0
"""Capture 4's mean context of a running request: mean prompt 2,122 + half the mean output 224."""

PREFILL_EFFICIENCY = 0.79
"""Achieved / peak dense FLOP/s in prefill: 2 × 8e9 × tokens (+ attention) on one H200 (989 TFLOP/s)
at 21 µs per token (capture 4's fit)."""
DECODE_EFFICIENCY = 0.75
"""Achieved / peak memory bandwidth streaming the weights and KV cache (assumed; the capture's decode is
dominated by its fixed per-layer cost, so it cannot separate the two)."""
DECODE_LAYER_S = (calibration.DECODE_STEP_S - 16e9 / (DEFAULT.mem_bytes_s * DECODE_EFFICIENCY)) / REF_LAYERS
"""The engine's fixed cost per layer and step (kernel launches of a plain PyTorch loop): capture 4's
51.6 ms step at batch 1 less the 4.4 ms the 8B weights take to stream, over 32 layers (1.47 ms)."""
DECODE_SEQ_LAYER_S = (calibration.DECODE_STEP_S_PER_SEQ
                      - REF_KV_BYTES_PER_TOKEN * REF_CONTEXT_TOKENS / (DEFAULT.mem_bytes_s * DECODE_EFFICIENCY)) / REF_LAYERS
"""Per running request and layer (attention and bookkeeping): capture 4's 0.161 ms per request less the
KV cache bytes of its mean context."""
DECODE_KERNEL_SHARE = 0.5
"""The share of decode's dynamic power (above loaded) that every GPU of a tensor-parallel group draws
whatever its share of the bytes: the same kernels run on each (assumed; one GPU cannot separate it)."""
ALLREDUCE_LATENCY_S = 10e-6
"""One small all-reduce over NVLink (assumed: NCCL's latency-bound regime)."""
LINK_BYTES_S = {"H200": 450e9, "H100": 450e9, "B200": 900e9, "A100": 300e9}
"""One direction of NVLink per GPU (datasheet: 900 / 900 / 1,800 / 600 GB/s bidirectional); others PCIe."""
PCIE_BYTES_S = 32e9
CLOCK_POWER_EXPONENT = 3.0
"""Dynamic power ∝ clock × voltage², voltage ∝ clock over the DVFS range: ∝ clock³."""
MEMORY_CLOCK_SENSITIVITY = 0.1
"""A memory-bound step's time ∝ 1 / clock^0.1: the HBM clock does not scale with the SM clock."""
COMPUTE_MAX_W = 900.0
"""The highest prefill plateau a 700 W H200 holds at full clocks (capture 4: p90 862 W; phases.PREFILL_W)."""
COMPUTE_W_PER_UTILISATION = (calibration.PREFILL_PLATEAU_W - calibration.LOADED_W) / (DEFAULT.tdp_w - calibration.IDLE_W) / PREFILL_EFFICIENCY
"""Power above loaded per unit of tensor-core utilisation (achieved / peak FLOP/s), as a share of the GPU's
TDP − idle range: capture 4's prefill plateau (788 W) at the prefill efficiency 0.79 (1.44)."""


def decode_level_for_mean(mean_w: float, ceiling_w: float, log_sd: float = calibration.DECODE_LOG_SD) -> float:
    """The decode level whose samples average ``mean_w``: the sampler (power.py) spreads decode samples
    lognormally around the level (capture 4's sd of log power, mean 1.12 × the level) and clips them at
    the GPU's ceiling, so a level meant as a mean power is written lower (bisection on the clipped mean)."""

    def clipped_mean(level: float) -> float:
        # E[min(level × e^(sd Z), ceiling)]
        k = math.log(ceiling_w / level) / log_sd
        phi = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
        return level * math.exp(log_sd ** 2 / 2) * phi(k - log_sd) + ceiling_w * (1.0 - phi(k))

    if mean_w >= ceiling_w:
        return ceiling_w
    lo, hi = mean_w / math.exp(log_sd ** 2 / 2), mean_w
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if clipped_mean(mid) < mean_w else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Engine:
    """A serving engine's fixed costs around the roofline, and where its decode power comes from."""

    name: str
    prefill_overhead_s: float
    """Fixed cost of one prefill batch."""
    decode_step_s: float
    """Fixed cost of one decode step (scheduling, sampling, a CUDA-graph launch)."""
    decode_layer_s: float
    """Fixed cost per layer and step (kernel launches of an engine without CUDA graphs)."""
    decode_seq_layer_s: float
    """Cost per running request, layer and step beyond its KV-cache bytes."""
    power_from_utilisation: bool
    """Decode power from the step's bandwidth and compute utilisation (fitted on this engine's own
    power), else capture 4's decode levels scaled by the share of the step spent moving bytes."""


CAPTURE = Engine("capture", calibration.PREFILL_OVERHEAD_S, 0.0, DECODE_LAYER_S, DECODE_SEQ_LAYER_S, False)
"""The default (no ``engine`` key, or one not calibrated): capture 4's plain PyTorch loop, 58.4 ms per
prefill batch and 1.47 ms per layer and step of fixed cost."""
VLLM = Engine("vllm", calibration.VLLM_STEP_OVERHEAD_S, calibration.VLLM_STEP_OVERHEAD_S, 0.0, 0.0, True)
"""vLLM: CUDA graphs and fused kernels leave one small fixed cost per step, so decode runs close to the
bandwidth bound (vllm-a100-smoke; calibration.VLLM_STEP_OVERHEAD_S). A running request costs its KV-cache
bytes only."""
ENGINES = {"vllm": VLLM}


def engine_for(name: str | None) -> Engine:
    """The engine an inventory's free-form ``engine`` names (any case); ``CAPTURE`` when absent or not calibrated."""
    return ENGINES.get(str(name).strip().lower(), CAPTURE) if name else CAPTURE


def layers_width(params_b: float) -> tuple[float, float]:
    """Layers and width of a dense decoder of ``params_b`` billion parameters (≈ 12 × layers × width²):
    the Llama 3 family's proportions (8B: 32 × 4,096; 70B: 80 × 8,192; 405B: 126 × 16,384),
    layers ∝ params^0.42."""
    layers = REF_LAYERS * (params_b / 8.0) ** 0.42
    width = math.sqrt(params_b * 1e9 / (12.0 * layers))
    return layers, width


@dataclass(frozen=True)
class GpuPower:
    """One GPU model under one enforced limit: the range its phases draw in."""

    spec: GpuSpec
    limit_w: float

    @classmethod
    def of(cls, model: str | None, tdp_w: float | None, limit_w: float | None) -> GpuPower:
        """The spec for NVML name ``model`` (the calibrated H200 when unknown, scaled to ``tdp_w``)."""
        spec = spec_for(model)
        if spec is None:
            spec = DEFAULT if tdp_w in (None, DEFAULT.tdp_w) else _scaled(DEFAULT, float(tdp_w))
        elif tdp_w is not None and tdp_w != spec.tdp_w:
            spec = _scaled(spec, float(tdp_w))
        return cls(spec, float(limit_w or spec.tdp_w))

    @property
    def ceiling_w(self) -> float:
        return self.spec.ceiling_w(self.limit_w)

    def map_w(self, h200_w):
        """A level measured on the 700 W H200 at the same share of this GPU's idle → TDP range."""
        s = self.spec
        return s.idle_w + (h200_w - calibration.IDLE_W) * (s.tdp_w - s.idle_w) / (DEFAULT.tdp_w - calibration.IDLE_W)

    @property
    def allowed_w(self) -> float:
        """The highest level a phase keeps at full clocks: uncapped, every compute-bound level the
        capture showed (up to ``COMPUTE_MAX_W`` on the H200); under a lower limit, that × limit / TDP."""
        return max(self.map_w(COMPUTE_MAX_W) * min(1.0, self.limit_w / self.spec.tdp_w), self.spec.idle_w + 1.0)

    def clock(self, level_w: float) -> float:
        """The clock share at which a phase that draws ``level_w`` at full clocks fits the limit
        (1 when uncapped: the limiter lets compute-bound phases overshoot TDP as the capture shows)."""
        allowed = self.allowed_w
        if level_w <= allowed:
            return 1.0
        return ((allowed - self.spec.idle_w) / (level_w - self.spec.idle_w)) ** (1.0 / CLOCK_POWER_EXPONENT)

    def capped_w(self, level_w: float, clock: float) -> float:
        return self.spec.idle_w + (level_w - self.spec.idle_w) * clock ** CLOCK_POWER_EXPONENT


def _scaled(spec: GpuSpec, tdp_w: float) -> GpuSpec:
    from dataclasses import replace

    k = tdp_w / spec.tdp_w
    return replace(spec, tdp_w=tdp_w, idle_w=spec.idle_w * k)


@dataclass(frozen=True)
class ServingModel:
    """One replica: a decoder of ``params_b`` (``active_b`` per token) sharded tp × pp on one GPU model."""

    gpu: GpuPower
    params_b: float = DEFAULT_PARAMS_B
    active_b: float = DEFAULT_PARAMS_B
    precision: str = DEFAULT_PRECISION
    tp: int = 1
    pp: int = 1
    context_tokens: float = REF_CONTEXT_TOKENS
    engine: Engine = CAPTURE

    @property
    def layers(self) -> float:
        return layers_width(self.params_b)[0]

    @property
    def width(self) -> float:
        return layers_width(self.params_b)[1]

    @property
    def kv_bytes_per_token(self) -> float:
        """Grouped-query attention with 8 KV heads of 128 (Llama 3 at every size), in the model's precision."""
        return 2 * 8 * 128 * self.layers * min(BYTES_PER_PARAM[self.precision], 2.0)

    def _link(self) -> float:
        return LINK_BYTES_S.get(self.gpu.spec.key, PCIE_BYTES_S)

    def _allreduce_s(self, tokens: float) -> float:
        """Two all-reduces per layer of ``tokens`` activations (ring: 2 (tp − 1) / tp of the bytes)."""
        if self.tp <= 1:
            return 0.0
        nbytes = tokens * self.width * 2.0 * 2.0 * (self.tp - 1) / self.tp
        return 2.0 * self.layers * (ALLREDUCE_LATENCY_S + nbytes / self._link())

    @property
    def prefill_overhead_s(self) -> float:
        return self.engine.prefill_overhead_s

    def prefill_compute_s(self, tokens: float, sum_sq_tokens: float) -> float:
        """The GPU part of a prefill batch (after the engine's fixed ``prefill_overhead_s``)."""
        flops = 2.0 * self.active_b * 1e9 * tokens + 2.0 * self.layers * self.width * sum_sq_tokens
        peak = self.gpu.spec.peak_flops(self.precision) or DEFAULT.bf16_flops
        return flops / (self.tp * peak * PREFILL_EFFICIENCY) + self._allreduce_s(tokens)

    def decode_bytes(self, running: float) -> float:
        """Bytes one decode step streams from HBM over the whole replica: the weights and the running
        requests' KV cache."""
        weights = self.params_b * 1e9 * BYTES_PER_PARAM[self.precision]
        return weights + running * self.context_tokens * self.kv_bytes_per_token

    def decode_parts_s(self, running: float) -> tuple[float, float]:
        """(bytes-moving time, everything else) of one decode step with ``running`` requests."""
        bw = (self.gpu.spec.mem_bytes_s or DEFAULT.mem_bytes_s) * DECODE_EFFICIENCY
        move = self.decode_bytes(running) / (self.tp * bw)
        e = self.engine
        fixed = e.decode_step_s + self.layers * (e.decode_layer_s + e.decode_seq_layer_s * running) + self._allreduce_s(running)
        return move, fixed

    def decode_step_s(self, running: float) -> float:
        move, fixed = self.decode_parts_s(running)
        return move + fixed

    def decode_busy_ratio(self, running: float) -> float:
        """The share of the step spent moving bytes, relative to the calibrated 8B on one H200 at the
        same batch: what scales decode's dynamic power."""
        move, fixed = self.decode_parts_s(running)
        ref = REFERENCE.decode_parts_s(running)
        ratio = (move / (move + fixed)) / (ref[0] / (ref[0] + ref[1]))
        return (DECODE_KERNEL_SHARE + (1 - DECODE_KERNEL_SHARE) * ratio) / self.pp

    def decode_flops(self, running: float) -> float:
        """FLOPs of one decode step: 2 × active parameters per token, plus attention over the context."""
        return running * (2.0 * self.active_b * 1e9 + 4.0 * self.layers * self.width * self.context_tokens)

    def decode_utilisation(self, running: float, step_s: float) -> tuple[float, float]:
        """(memory-bandwidth, tensor-core) utilisation of each GPU over a decode step of ``step_s``: its
        share of the bytes (1 / (tp × pp)) over the step × its peak bandwidth, and likewise for FLOPs."""
        s = self.gpu.spec
        gpus = self.tp * self.pp
        peak = s.peak_flops(self.precision) or DEFAULT.bf16_flops
        return (self.decode_bytes(running) / (gpus * step_s * (s.mem_bytes_s or DEFAULT.mem_bytes_s)),
                self.decode_flops(running) / (gpus * step_s * peak))

    def decode_power_w(self, running: float, step_s: float | None = None) -> float:
        """Mean decode power of each GPU at full clocks from what the step does (engines with
        ``power_from_utilisation``): loaded + bytes per second × ``calibration.DECODE_J_PER_BYTE`` +
        (TDP − idle) × tensor-core utilisation × ``COMPUTE_W_PER_UTILISATION``."""
        step = self.decode_step_s(running) if step_s is None else step_s
        mem, compute = self.decode_utilisation(running, step)
        s = self.gpu.spec
        bytes_per_s = mem * (s.mem_bytes_s or DEFAULT.mem_bytes_s)
        return (float(self.gpu.map_w(calibration.LOADED_W)) + calibration.DECODE_J_PER_BYTE * bytes_per_s
                + (s.tdp_w - s.idle_w) * COMPUTE_W_PER_UTILISATION * compute)


REFERENCE = ServingModel(GpuPower(DEFAULT, DEFAULT.tdp_w))
"""The calibrated configuration: an 8B bf16 decoder on one 700 W H200 (capture 4)."""


def serving_model(spec: dict, n_gpus: int, gpu: GpuPower, prompt_median: float, output_median: float) -> ServingModel:
    """A replica from an endpoint's inventory keys (absent: 8B bf16, tp = the endpoint's GPUs)."""
    params = float(spec.get("params_b") or DEFAULT_PARAMS_B)
    active = float(spec.get("active_params_b") or params)
    tp = spec.get("tp")
    pp = spec.get("pp") or 1
    if tp is None:
        tp = max(1, n_gpus // pp)
    precision = spec.get("precision") or DEFAULT_PRECISION
    engine = engine_for(spec.get("engine"))
    # the mean running context scales with the medians (capture 4's: 1,463 prompt, 182 output tokens)
    context = REF_CONTEXT_TOKENS * (prompt_median + output_median / 2) / (1463.0 + 182.0 / 2)
    return ServingModel(gpu, params, active, precision, int(tp), int(pp), context, engine)
