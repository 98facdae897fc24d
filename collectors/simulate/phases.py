"""Phase codes and per-phase power levels of an H200 (700 W), calibrated on ``h200-capture-2``.

A workload is a timeline of segments (start_s, kind, level_w); :mod:`power` samples it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IDLE, LOADED, PREFILL, DECODE, STEP, COMM, CKPT, EVAL = range(8)
NAMES = ("idle", "loaded", "prefill", "decode", "step", "comm_wait", "checkpoint", "eval")

IDLE_W = 79.0
"""Nothing loaded: the capture's idle phases read 78–80 W."""
LOADED_W = 121.0
"""Model resident, waiting: 120–126 W between requests and during checkpoints in the capture."""
CKPT_W = 122.0
COMM_W = (130.0, 190.0)
"""Blocked in a collective: the capture's comm_wait median 123 W; NCCL kernels on a real fabric add some."""
STEP_W = (680.0, 720.0)
EVAL_W = (430.0, 520.0)
PREFILL_W = (620.0, 820.0)
"""Prefill level from a single small prompt to a full token budget (capture: median 717 W, p95 878 W)."""
DECODE_BASE_W = 245.0
DECODE_SPAN_W = 200.0
DECODE_SCALE_SEQS = 48.0
PEAK_W = 960.0
"""Highest instantaneous reading: compute-bound phases overshoot TDP for milliseconds (capture max 915 W)."""

NOISE_SD = np.array([0.008, 0.02, 0.05, 0.08, 0.04, 0.08, 0.01, 0.05], dtype=np.float32)
"""Per-sample relative noise of the instantaneous reading, by phase."""
SPIKE_P = np.array([0, 0, 0.15, 0.01, 0.08, 0, 0, 0.03], dtype=np.float32)
"""Chance that a sample catches a transient overshoot towards PEAK_W, by phase."""
CLOCK_MHZ = np.array([345, 1980, 1755, 1980, 1710, 1980, 1980, 1830], dtype=np.float32)
UTIL_PCT = np.array([0, 0, 100, 93, 100, 35, 3, 97], dtype=np.float32)


def decode_w(running: np.ndarray | int) -> np.ndarray:
    """Decode is memory-bound: ~250 W at batch 1, rising towards ~445 W as the batch fills."""
    return DECODE_BASE_W + DECODE_SPAN_W * (1 - np.exp(-np.asarray(running, dtype=np.float64) / DECODE_SCALE_SEQS))


def prefill_w(tokens: np.ndarray | int, budget_tokens: int) -> np.ndarray:
    share = np.minimum(np.asarray(tokens, dtype=np.float64) / budget_tokens, 1.0)
    return PREFILL_W[0] + (PREFILL_W[1] - PREFILL_W[0]) * np.sqrt(share)


@dataclass
class Timeline:
    """Piecewise-constant phases from ``start_s[i]`` until ``start_s[i+1]`` (seconds after 00:00 UTC of day 0)."""

    start_s: np.ndarray
    kind: np.ndarray
    level_w: np.ndarray

    @classmethod
    def constant(cls, kind: int, level_w: float) -> "Timeline":
        return cls(np.array([-1e9]), np.array([kind], np.uint8), np.array([level_w], np.float32))
