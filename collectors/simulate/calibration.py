"""Every parameter the simulator fitted on a real capture, in one place, with the capture it came from.

``bench/calibrate_simulator.py`` re-derives the fitted values from ``../shared/data`` and compares
the simulator with a capture that was not used for fitting (docs/simulator.md, "Calibration").
Captures: ``h200-capture-4`` (one H200, 700 W, driver 580.159.04, 2026-12-03: continuous batching
of an 8B decoder, a ~3B training job, and the project's own collector beside the raw sampler);
``h200-capture-2`` (the same GPU, 2026-12-02: static batching, a 1.5B training job).
"""

from __future__ import annotations

import numpy as np

# --- collector shape (h200-capture-4/collector: what `wattline collect` wrote, 374 s) -------------

BUFFER_SPACING_MS_QUANTILES = np.array(
    [0.3, 11.0, 12.8, 17.2, 18.3, 18.9, 19.4, 19.8, 19.9, 20.0, 20.0,
     20.0, 20.1, 20.1, 20.3, 21.3, 22.8, 25.6, 29.0, 30.0, 49.2]
)
"""Spacing of the driver's power buffer (``nvmlDeviceGetSamples``), at quantiles 0, 5, …, 100 %:
median 20.0 ms, p90 29.0 ms, mean 20.4 ms (48.9 rows/s). The driver stamps each sample late by a
varying few ms; the simulator draws spacings from this table (inverse CDF, linear between quantiles)."""

FIELD_PERIOD_NS = 100_000_000
FIELD_TICK_OFFSET_NS = 4_850_000
FIELD_TICK_JITTER_NS = 50_000
"""Field rows: the collector's 100 ms tick; its NVML calls return 4.81–5.05 ms after the tick (p1–p99)."""

INSTANT_AGE_NS = (6_000_000, 10_000_000)
"""A field row's ``power_w`` (field 186) is a driver sample 6–10 ms old (p5–p95 age of the newest buffer
sample at the row's ts; 95 % of field values appear verbatim in the buffer)."""

AVG_WINDOW_NS = 1_000_000_000
AVG_LAG_NS = 60_000_000
"""``power_avg_w`` (``nvmlDeviceGetPowerUsage`` on Hopper) is the mean of the buffer samples in the 1 s
ending 60 ms before the row (best fit over windows 0.5–1.5 s and lags 0–1.2 s: median |error| 2.6 W)."""

SLOW_FIELDS_EVERY_NS = 1_000_000_000
ENERGY_EVERY_NS = 30_000_000_000
"""The collector's default cadences: clocks, utilisation, memory, temperature and the power limit on one
field row a second, the energy counter (≈ 4 ms of CPU per read) every 30 s."""

POWER_QUANTUM_W = 0.3235
"""The driver reports milliwatts, but its readings sit on a lattice ~0.32 W apart (capture 4's buffer:
3,014 distinct values in 18,444 samples, median step between neighbouring values 0.324 W at p75):
few distinct floats, so Parquet dictionary-encodes them (~1.8 B a row instead of ~3)."""

# --- per-GPU engine and power (fitted on h200-capture-4 by bench/calibrate_simulator.py) -------
# An 8B decoder on one H200 (700 W). Prefill and decode times are per GPU: an endpoint of n GPUs
# (one tensor-parallel group) divides the per-token prefill time by n.

IDLE_W = 81.6
"""Nothing loaded: median of capture 4's first 8 s (capture 2: 78.1 W)."""
LOADED_W = 84.2
"""Model resident, no request running and no prefill within −20/+80 ms (capture 2's server: 120.1 W —
its clocks stayed up between static batches)."""
PREFILL_OVERHEAD_S = 0.0584
PREFILL_S_PER_TOKEN = 21.0e-6
"""Prefill duration = 58.4 ms + 21 µs × prompt tokens (least squares over capture 4's 368 single-request
prefills, residual sd 26 %; capture 2's padded batches give 72.5 ms + 24 µs)."""
PREFILL_ONSET_S = 0.06
"""The board's power shows a prefill 60 ms after the engine starts it (median of the prefills longer than
150 ms crosses half-way at +60 ms; capture 2: +90 ms) and drops within 20 ms of its end."""
PREFILL_PLATEAU_W = 788.0
PREFILL_PLATEAU_SD_W = 76.0
"""Per-prefill median power after the onset: median 788 W, p10–p90 668–862 W (sd ≈ (p90 − p10) / 2.56);
hardly depends on tokens (capture 2's batches: 734 W)."""
DECODE_BASE_W = 131.0
DECODE_SPAN_W = 76.6
DECODE_SCALE_SEQS = 6.0
"""Decode level = 131 + 76.6 × (1 − e^(−running / 6)) W: 141 W at 1 running, ~208 W from ~20 running
(weighted least squares over per-running medians, samples outside prefills)."""
DECODE_LOG_SD = 0.48
"""Decode samples are right-skewed (a floor near 125 W, excursions to 400–900 W): lognormal around the
level with this sd of log(power / level) (IQR / 1.349)."""
DECODE_STEP_S = 0.0516
DECODE_STEP_S_PER_SEQ = 0.000161
"""Decode step = 51.6 ms + 0.161 ms × running (per request: decode time minus the prefills inside it,
over its output tokens, against its mean running count; capture 4 ran 30–38 requests most of the time)."""
STATIC_BATCH_PADDED_TOKENS = 32_768
"""Capture 2's static batcher: it took waiting requests in arrival order while batch size × longest
prompt stayed ≤ 32,768 padded tokens (each of its 8 batches stops exactly where the next request
would pass it: 30,679 of 33,468, 22,815 of 47,222, ...); no cap on the count showed (up to 13)."""
STEP_W = (684.7, 729.1)
"""Training step level, per step uniform in the p25–p75 of capture 4's per-step medians (a ~3B model;
capture 2's 1.5B: 741.5 W)."""
STALL_W = 126.9
"""Input-pipeline stall (``data_wait``) between steps: 126.9 W (capture 2's blocking wait: 122.8 W)."""
CKPT_W = 125.6
"""Checkpoint write: 125.6 W (capture 2: 122.1 W)."""


# --- a tuned serving engine (fitted on vllm-a100-smoke run-1784415083 by bench/calibrate_simulator.py) -
# Qwen3-8B (8.2B, bf16) served by vLLM on one 400 W A100, one request decoding at a time with 4.1–5.1 k
# tokens of context: 12.67 ms per output token at a median 293 W outside prefills.

VLLM_STEP_OVERHEAD_S = 0.0015
"""vLLM's fixed cost per engine step (scheduling, sampling, a CUDA-graph launch): the smoke run's 12.67 ms
per output token less the 11.15 ms its 17.1 GB of weights and KV cache (mean context 4,936 tokens) take at
the A100's 2.04 TB/s × the decode efficiency every engine shares (physics.DECODE_EFFICIENCY, 0.75).
Taken as its fixed cost per prefill batch too."""
DECODE_J_PER_BYTE = 170e-12
"""Decode power above loaded per byte per second moved from HBM (weights and KV cache; 170 pJ per byte,
21 pJ per bit: the DRAM access and the on-chip movement to the SMs): the smoke run's 293 W on the A100
(loaded 61 W) while its steps moved 1.35 TB/s, less its small compute term (tensor-core utilisation 0.005
× physics.COMPUTE_W_PER_UTILISATION × the 340 W range). A cost per byte, not a share of TDP: a GPU's TDP
is sized for its tensor cores, its memory traffic costs energy per byte whatever the TDP."""


# --- energy per token, the same way on a capture and on the simulator ----------------------------

def _inside(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each ``t`` lies in the union of the intervals [start, end)."""
    if len(start) == 0:
        return np.zeros(len(t), bool)
    order = np.argsort(start)
    s, e = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(s, t, side="right") - 1
    return (i >= 0) & (t < e[np.maximum(i, 0)])


def joules_per_token(t_s: np.ndarray, power_w: np.ndarray, prefill_start_s: np.ndarray, first_token_s: np.ndarray,
                     end_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                     grid_s: float = 0.001) -> tuple[float, float]:
    """(J per prompt token, J per output token) of one GPU's power samples and the requests it served:
    power interpolated piecewise-linearly on a 1 ms grid, integrated over the union of the prefill
    intervals (over all prompt tokens) and over the decode intervals outside any prefill (over all
    output tokens). Applied alike to a capture and to the simulator replaying it, so the two compare."""
    t0, t1 = float(np.min(prefill_start_s)), float(np.max(end_s))
    grid = np.arange(t0, t1, grid_s)
    order = np.argsort(t_s)
    p = np.interp(grid, np.asarray(t_s, float)[order], np.asarray(power_w, float)[order])
    pre = _inside(grid, np.asarray(prefill_start_s, float), np.asarray(first_token_s, float))
    dec = _inside(grid, np.asarray(first_token_s, float), np.asarray(end_s, float)) & ~pre
    return (float(p[pre].sum() * grid_s / np.sum(prompt_tokens)),
            float(p[dec].sum() * grid_s / np.sum(output_tokens)))
