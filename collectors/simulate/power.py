"""Per-GPU NVML-like readings on a 100 ms poll grid, sampled from a phase timeline (vectorised)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors.simulate import calibration, phases, physics

PERIOD_NS = 100_000_000
JITTER_NS = (500_000, 6_000_000)
"""A poller wakes every 100 ms and its NVML calls land a few ms late (capture: 6–10 ms per row)."""
RAMP_S = phases.RAMP_S
AVG_WINDOW = 10
"""``power_avg_w``: the trailing 1 s mean that ``nvmlDeviceGetPowerUsage`` reports on Hopper."""
TEMP_BASE_C = 30.0
TEMP_C_PER_W = 0.05
TEMP_TAU_S = 180.0
MEM_IDLE_MIB = 615
MEM_INFERENCE_MIB = 129_400
"""A serving engine preallocates ~90 % of the 141 GB for weights and KV cache."""
MEM_TRAINING_MIB = 118_000
LIMITER_SLACK = 1.04
"""The power controller holds every 1 s average of the instantaneous reading to ≤ 1.04 × the enforced
limit (capture 4's highest 1 s average: 725.7 W at 700 W, 1.037 ×; capture 2's: 595.6 W)."""


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
    gpu: physics.GpuPower = physics.REFERENCE.gpu,
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
    kind, power_w = _instant_w(rng, timeline, t_s, gain, 0.1, gpu)
    # the 1 s windows of power_avg_w below: exactly AVG_WINDOW samples
    power_w = hold_to_limit(np.arange(n, dtype=np.int64) * PERIOD_NS, power_w, gpu.limit_w * LIMITER_SLACK - 0.2, 0.1)

    csum = np.concatenate([[0.0], np.cumsum(power_w, dtype=np.float64)])
    lag = np.maximum(np.arange(1, n + 1) - AVG_WINDOW, 0)
    power_avg_w = np.round((csum[1:] - csum[lag]) / (np.arange(1, n + 1) - lag), 1).astype(np.float32)

    dt_s = np.diff(grid_ns, prepend=grid_ns[0] - PERIOD_NS) / 1e9
    energy_j = np.round(energy_start_j + np.cumsum(power_w * dt_s), 3)

    sm_clock_mhz, gpu_util_pct = _slow_fields(rng, kind, power_w)

    temp_c, temp_state_w = _temperature(power_w, temp_offset_c, temp_state_w)
    ts_ns = grid_ns + epoch_ns
    mem = np.full(n, mem_mib, np.uint32)
    return GpuReadings(ts_ns, power_w, power_avg_w, energy_j, sm_clock_mhz, gpu_util_pct, mem, temp_c), temp_state_w


def _instant_w(rng: np.random.Generator, timeline: phases.Timeline, t_s: np.ndarray, gain: float,
               resolution_w: float, gpu: physics.GpuPower = physics.REFERENCE.gpu) -> tuple[np.ndarray, np.ndarray]:
    """(phase kind, instantaneous power) at ``t_s``: the phase level ramped from the previous one,
    × gain × per-sample noise, with the phase's chance of a transient overshoot towards the GPU's
    ceiling (:mod:`collectors.gpu_specs`: e.g. 980 W on a 700 W H200, 500 W on a 400 W A100)."""
    n = len(t_s)
    idx = np.searchsorted(timeline.start_s, t_s, side="right") - 1
    kind = timeline.kind[idx]
    level = timeline.level_w[idx]
    prev = timeline.reached_w()[idx]
    frac = np.minimum((t_s - timeline.start_s[idx]) / timeline.ramp_s()[idx], 1.0).astype(np.float32)
    level = prev + (level - prev) * frac
    z = rng.standard_normal(n, dtype=np.float32)
    noise = np.where(kind == phases.DECODE, np.exp(z * np.float32(calibration.DECODE_LOG_SD)), 1 + z * phases.NOISE_SD[kind])
    p = level * gain * noise
    spike = rng.random(n, dtype=np.float32) < phases.SPIKE_P[kind]
    ceiling = np.float32(gpu.ceiling_w)
    p = np.where(spike, p + np.maximum(ceiling - p, 0) * rng.random(n, dtype=np.float32), p)
    p = np.clip(p, min(60.0, 0.75 * gpu.spec.idle_w), ceiling)
    if resolution_w == 0.1:  # the simple shape: 0.1 W
        return kind, np.round(p, 1).astype(np.float32)
    return kind, np.round(np.round(p / resolution_w) * resolution_w, 3).astype(np.float32)


def hold_to_limit(t_ns: np.ndarray, p: np.ndarray, limit_w: float, resolution_w: float) -> np.ndarray:
    """Scale the samples of every trailing 1 s window whose mean exceeds ``limit_w`` down to it: what
    the power controller does by lowering clocks. Each sample takes the smallest factor of the windows
    it belongs to, so every window's mean ends ≤ the limit (a no-op, one cumsum, when none exceeds)."""
    n = len(p)
    if n == 0:
        return p
    csum = np.concatenate([[0.0], np.cumsum(p, dtype=np.float64)])
    hi = np.arange(1, n + 1)
    lo = np.searchsorted(t_ns, t_ns - 1_000_000_000, side="right")
    mean = (csum[hi] - csum[lo]) / (hi - lo)
    over = mean > limit_w
    if not over.any():
        return p
    r = np.where(over, limit_w / mean, 1.0)
    # the factor of sample j: the smallest r over the windows (ending at i ≥ j) that hold j;
    # a forward running minimum over the longest window's sample count, by doubling
    width = int((hi - lo).max())
    f = r.copy()
    span = 1
    while span < width:
        step = min(span, width - span)
        f[:-step] = np.minimum(f[:-step], f[step:])
        span += step
    out = p * f
    if resolution_w == 0.1:
        return (np.floor(out * 10) / 10).astype(np.float32)
    return np.round(np.floor(out / resolution_w) * resolution_w, 3).astype(np.float32)


def _slow_fields(rng: np.random.Generator, kind: np.ndarray, power_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    throttle = np.where(kind == phases.PREFILL, np.maximum(power_w - 650.0, 0) * 1.2, 0)
    clock = phases.CLOCK_MHZ[kind] - throttle
    sm_clock_mhz = (np.round(clock / 15.0) * 15).clip(345, 1980).astype(np.uint16)
    util = phases.UTIL_PCT[kind] - rng.integers(0, 6, len(kind)) * (phases.UTIL_PCT[kind] > 5)
    return sm_clock_mhz, util.clip(0, 100).astype(np.uint8)


@dataclass
class BufferReadings:
    """The driver's power buffer (``nvmlDeviceGetSamples``): ~20 ms apart, power only."""

    ts_ns: np.ndarray
    power_w: np.ndarray


def _buffer_times_ns(rng: np.random.Generator, lo_ns: int, hi_ns: int) -> np.ndarray:
    """Driver sample times from ``lo_ns`` to ``hi_ns``, spacings drawn from the capture's distribution."""
    q = calibration.BUFFER_SPACING_MS_QUANTILES
    mean_ms = float(np.mean(q[1:-1]))
    n = int((hi_ns - lo_ns) / (mean_ms * 1e6) * 1.1) + 64
    gaps_ms = np.interp(rng.random(n), np.linspace(0.0, 1.0, len(q)), q)
    t = lo_ns + int(rng.integers(0, 20_000_000)) + np.cumsum(np.rint(gaps_ms * 1000).astype(np.int64) * 1000)
    while t[-1] < hi_ns:  # rare: an unlucky draw of long gaps
        more = np.cumsum(np.rint(np.interp(rng.random(n), np.linspace(0.0, 1.0, len(q)), q) * 1000).astype(np.int64) * 1000)
        t = np.concatenate([t, t[-1] + more])
    t = t // 1000 * 1000  # the driver stamps in µs
    return t[t < hi_ns]


def sample_gpu_collector(
    rng: np.random.Generator,
    timeline: phases.Timeline,
    window_s: tuple[float, float],
    epoch_ns: int,
    energy_start_j: float,
    mem_mib: int,
    gain: float,
    temp_offset_c: float,
    temp_state_w: float | None = None,
    gpu: physics.GpuPower = physics.REFERENCE.gpu,
) -> tuple[BufferReadings, GpuReadings, float, float]:
    """What ``wattline collect`` reads from one GPU in ``window_s``: the driver's ~20 ms buffer and
    the 100 ms field rows (instant power = a buffer sample 6–10 ms old, ``power_avg_w`` = the
    buffer's trailing 1 s mean 60 ms late), parameters from :mod:`calibration`.

    Returns the buffer, the field rows, the energy counter at the window's end and the thermal state;
    buffer samples of the second before the window feed the first rows' 1 s average.
    """
    c = calibration
    lo_ns, hi_ns = int(round(window_s[0] * 1e9)), int(round(window_s[1] * 1e9))
    lead_ns = c.AVG_WINDOW_NS + c.AVG_LAG_NS + 100_000_000
    bt = _buffer_times_ns(rng, lo_ns - lead_ns, hi_ns)
    _, bw = _instant_w(rng, timeline, bt / 1e9, gain, c.POWER_QUANTUM_W, gpu)
    # field rows average any ~50 buffer samples, not only those of a window ending at a sample: one low
    # sample more or less moves that mean by ≤ 2 % of the limit, so the buffer is held 2 % lower
    bw = hold_to_limit(bt, bw, gpu.limit_w * (LIMITER_SLACK - 0.02), c.POWER_QUANTUM_W).astype(np.float32)

    i0 = -(-lo_ns // c.FIELD_PERIOD_NS)
    i1 = -(-hi_ns // c.FIELD_PERIOD_NS)
    ft = (np.arange(i0, i1, dtype=np.int64) * c.FIELD_PERIOD_NS + c.FIELD_TICK_OFFSET_NS
          + np.rint(rng.normal(0.0, c.FIELD_TICK_JITTER_NS, i1 - i0)).astype(np.int64)) // 1000 * 1000
    ft = ft[ft < hi_ns]
    age = rng.integers(*c.INSTANT_AGE_NS, len(ft))
    inst = np.maximum(np.searchsorted(bt, ft - age, side="right") - 1, 0)
    power_w = bw[inst]
    csum = np.concatenate([[0.0], np.cumsum(bw, dtype=np.float64)])
    hi = np.searchsorted(bt, ft - c.AVG_LAG_NS, side="right")
    lo = np.searchsorted(bt, ft - c.AVG_LAG_NS - c.AVG_WINDOW_NS, side="right")
    power_avg_w = np.round((csum[hi] - csum[lo]) / np.maximum(hi - lo, 1), 3).astype(np.float32)

    # energy: each buffer sample held until the next, integrated from the window's start
    j = int(np.searchsorted(bt, lo_ns, side="right")) - 1
    edges = np.maximum(bt[j:], lo_ns)
    e_at = energy_start_j + np.concatenate([[0.0], np.cumsum(bw[j:-1] * (np.diff(edges) / 1e9))])
    k = np.searchsorted(bt[j:], ft, side="right") - 1
    energy_j = np.round(e_at[k] + bw[j:][k] * ((ft - edges[k]) / 1e9), 3)
    energy_end_j = float(e_at[-1] + bw[-1] * (hi_ns - edges[-1]) / 1e9)

    kind = timeline.kind[np.searchsorted(timeline.start_s, ft / 1e9, side="right") - 1]
    sm_clock_mhz, gpu_util_pct = _slow_fields(rng, kind, power_w)
    temp_c, temp_state_w = _temperature(power_w, temp_offset_c, temp_state_w)
    keep = bt >= lo_ns
    buffer = BufferReadings(bt[keep] + epoch_ns, bw[keep])
    field = GpuReadings(ft + epoch_ns, power_w, power_avg_w, energy_j, sm_clock_mhz, gpu_util_pct,
                        np.full(len(ft), mem_mib, np.uint32), temp_c)
    return buffer, field, energy_end_j, temp_state_w


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
