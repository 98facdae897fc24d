"""Per-GPU NVML-like readings on a 100 ms poll grid, sampled from a phase timeline (vectorised)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors.simulate import phases

PERIOD_NS = 100_000_000
JITTER_NS = (500_000, 6_000_000)
"""A poller wakes every 100 ms and its NVML calls land a few ms late (capture: 6–10 ms per row)."""
RAMP_S = 0.04
"""Power follows a phase change within tens of ms (capture: a 100 ms sample can land mid-ramp)."""
AVG_WINDOW = 10
"""``power_avg_w``: the trailing 1 s mean that ``nvmlDeviceGetPowerUsage`` reports on Hopper."""
TEMP_BASE_C = 30.0
TEMP_C_PER_W = 0.05
TEMP_TAU_S = 180.0
MEM_IDLE_MIB = 615
MEM_INFERENCE_MIB = 129_400
"""A serving engine preallocates ~90 % of the 141 GB for weights and KV cache."""
MEM_TRAINING_MIB = 118_000


@dataclass
class GpuReadings:
    ts_ns: np.ndarray
    power_w: np.ndarray
    power_avg_w: np.ndarray
    energy_j: np.ndarray
    sm_clock_mhz: np.ndarray
    gpu_util_pct: np.ndarray
    mem_used_mib: np.ndarray
    temp_c: np.ndarray


def sample_gpu(
    rng: np.random.Generator,
    timeline: phases.Timeline,
    window_s: tuple[float, float],
    epoch_ns: int,
    energy_start_j: float,
    mem_mib: int,
    gain: float,
    temp_offset_c: float,
    temp_state_w: float | None = None,
) -> tuple[GpuReadings, float]:
    """One GPU's readings in ``window_s`` (seconds after ``epoch_ns``), from its timeline.

    ``energy_start_j`` and ``temp_state_w`` carry the counter and the thermal state over from the
    previous window; the second value returned is the thermal state at the end of this one.
    """
    lo_s, hi_s = window_s
    i0 = int(round(lo_s * 1e9)) // PERIOD_NS
    n = int(round((hi_s - lo_s) * 1e9)) // PERIOD_NS
    grid_ns = (np.arange(n, dtype=np.int64) + i0) * PERIOD_NS + rng.integers(*JITTER_NS, n) // 1000 * 1000  # the driver's µs clock
    t_s = grid_ns / 1e9
    idx = np.searchsorted(timeline.start_s, t_s, side="right") - 1
    kind = timeline.kind[idx]
    level = timeline.level_w[idx]
    prev = timeline.level_w[np.maximum(idx - 1, 0)]
    frac = np.minimum((t_s - timeline.start_s[idx]) / RAMP_S, 1.0).astype(np.float32)
    level = prev + (level - prev) * frac
    p = level * gain * (1 + rng.standard_normal(n, dtype=np.float32) * phases.NOISE_SD[kind])
    spike = rng.random(n, dtype=np.float32) < phases.SPIKE_P[kind]
    p = np.where(spike, p + (phases.PEAK_W - p) * rng.random(n, dtype=np.float32), p)
    power_w = np.round(np.clip(p, 60.0, phases.PEAK_W), 1).astype(np.float32)

    csum = np.concatenate([[0.0], np.cumsum(power_w, dtype=np.float64)])
    lag = np.maximum(np.arange(1, n + 1) - AVG_WINDOW, 0)
    power_avg_w = np.round((csum[1:] - csum[lag]) / (np.arange(1, n + 1) - lag), 1).astype(np.float32)

    dt_s = np.diff(grid_ns, prepend=grid_ns[0] - PERIOD_NS) / 1e9
    energy_j = np.round(energy_start_j + np.cumsum(power_w * dt_s), 3)

    throttle = np.where(kind == phases.PREFILL, np.maximum(power_w - 650.0, 0) * 1.2, 0)
    clock = phases.CLOCK_MHZ[kind] - throttle
    sm_clock_mhz = (np.round(clock / 15.0) * 15).clip(345, 1980).astype(np.uint16)
    util = phases.UTIL_PCT[kind] - rng.integers(0, 6, n) * (phases.UTIL_PCT[kind] > 5)
    gpu_util_pct = util.clip(0, 100).astype(np.uint8)

    temp_c, temp_state_w = _temperature(power_w, temp_offset_c, temp_state_w)
    ts_ns = grid_ns + epoch_ns
    mem = np.full(n, mem_mib, np.uint32)
    return GpuReadings(ts_ns, power_w, power_avg_w, energy_j, sm_clock_mhz, gpu_util_pct, mem, temp_c), temp_state_w


def _temperature(power_w: np.ndarray, offset_c: float, state_w: float | None) -> tuple[np.ndarray, float]:
    """Die temperature lags power by minutes: an exponential average of per-10 s mean power."""
    block = 100
    n = len(power_w)
    pad = (-n) % block
    means = np.concatenate([power_w, np.full(pad, power_w[-1])]).reshape(-1, block).mean(axis=1)
    alpha = 1 - np.exp(-block * PERIOD_NS / 1e9 / TEMP_TAU_S)
    ema = np.empty_like(means)
    acc = float(means[0]) if state_w is None else state_w
    for i, m in enumerate(means.tolist()):
        acc += alpha * (m - acc)
        ema[i] = acc
    per_sample = np.repeat(ema, block)[:n]
    temp_c = np.rint(TEMP_BASE_C + offset_c + TEMP_C_PER_W * per_sample).clip(20, 95).astype(np.uint8)
    return temp_c, acc
