"""Phase codes and per-phase power levels of the calibrated H200 (700 W); fitted levels come from
:mod:`calibration`, :mod:`physics` places them in another GPU's range.

A workload is a timeline of segments (start_s, kind, level_w); :mod:`power` samples it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collectors.simulate import calibration

IDLE, LOADED, PREFILL, DECODE, STEP, COMM, CKPT, EVAL = range(8)
NAMES = ("idle", "loaded", "prefill", "decode", "step", "comm_wait", "checkpoint", "eval")

IDLE_W = calibration.IDLE_W
LOADED_W = calibration.LOADED_W
CKPT_W = calibration.CKPT_W
COMM_W = (130.0, 190.0)
"""Blocked in a collective: the captures' waits read 123–127 W (a sleep, or an input stall); NCCL kernels
on a real fabric draw more. Not fitted."""
STEP_W = calibration.STEP_W
EVAL_W = (430.0, 520.0)
"""Not in the captures: forward passes only, between decode and a training step."""
PREFILL_W = (600.0, 900.0)
"""Bounds of a prefill batch's level, drawn around the capture's plateau (calibration.PREFILL_PLATEAU_W)."""
DECODE_BASE_W = calibration.DECODE_BASE_W
DECODE_SPAN_W = calibration.DECODE_SPAN_W
DECODE_SCALE_SEQS = calibration.DECODE_SCALE_SEQS

NOISE_SD = np.array([0.008, 0.02, 0.05, 0.0, 0.04, 0.08, 0.01, 0.05], dtype=np.float32)
"""Per-sample relative noise of the instantaneous reading, by phase (decode: lognormal, calibration.DECODE_LOG_SD)."""
SPIKE_P = np.array([0, 0, 0.15, 0.0, 0.08, 0, 0, 0.03], dtype=np.float32)
"""Chance that a sample catches a transient overshoot towards the GPU's ceiling (gpu_specs), by phase."""
CLOCK_MHZ = np.array([345, 1980, 1755, 1980, 1710, 1980, 1980, 1830], dtype=np.float32)
RAMP_S = 0.04
"""Power follows a phase change within tens of ms (capture: a 100 ms sample can land mid-ramp)."""
PREFILL_EDGE_S = 0.02
"""A prefill's compute edges are sharper: capture 4's prefills longer than 150 ms rise from 20 % to 80 %
of their step within one driver sample (median 20 ms apart) and drop within 20 ms of their end."""
UTIL_PCT = np.array([0, 0, 100, 93, 100, 35, 3, 97], dtype=np.float32)


def decode_w(running: np.ndarray | int) -> np.ndarray:
    """Decode is memory-bound: ~141 W at batch 1, rising towards ~208 W as the batch fills (capture 4)."""
    return DECODE_BASE_W + DECODE_SPAN_W * (1 - np.exp(-np.asarray(running, dtype=np.float64) / DECODE_SCALE_SEQS))


def prefill_w(rng: np.random.Generator, n: int) -> np.ndarray:
    """Levels of ``n`` prefill batches: around the capture's plateau, hardly depending on the tokens."""
    return np.clip(rng.normal(calibration.PREFILL_PLATEAU_W, calibration.PREFILL_PLATEAU_SD_W, n), *PREFILL_W)


@dataclass
class Timeline:
    """Piecewise-constant phases from ``start_s[i]`` until ``start_s[i+1]`` (seconds after 00:00 UTC of day 0)."""

    start_s: np.ndarray
    kind: np.ndarray
    level_w: np.ndarray
    _ramp: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def _ramps(self) -> tuple[np.ndarray, np.ndarray]:
        """(ramp time, power reached when the segment starts) per segment, computed once.

        A segment ramps from the power the previous one actually reached, not from its nominal level:
        a prefill whose compute lasts 5 ms on a tensor-parallel group reaches a fraction of its plateau,
        and the decode after it starts from there (before, it started from the plateau never reached)."""
        if self._ramp is None:
            n = len(self.start_s)
            edge = (self.kind == PREFILL) | (np.r_[False, self.kind[:-1] == PREFILL])
            ramp = np.where(edge, PREFILL_EDGE_S, RAMP_S)
            lv = self.level_w.astype(np.float64)
            dur = np.diff(self.start_s, append=np.inf)
            f = np.minimum(dur / ramp, 1.0)  # how far segment i gets towards its level
            reached = np.empty(n)
            reached[0] = lv[0]
            reached[1:] = lv[:-1]
            short = np.flatnonzero(f[:-1] < 1.0) + 1  # segments whose predecessor did not reach its level
            for _ in range(64):  # chains of short segments are a few long; each pass settles one more link
                if not len(short):
                    break
                new = reached[short - 1] + (lv[short - 1] - reached[short - 1]) * f[short - 1]
                if np.array_equal(new, reached[short]):
                    break
                reached[short] = new
            self._ramp = (ramp, reached.astype(np.float32))
        return self._ramp

    def ramp_s(self) -> np.ndarray:
        return self._ramps()[0]

    def reached_w(self) -> np.ndarray:
        return self._ramps()[1]

    def on(self, gpu) -> Timeline:
        """This timeline of the calibrated H200's levels on another GPU model and limit
        (:class:`collectors.simulate.physics.GpuPower`): each level at the same share of its range,
        held to the limit as its clocks would be."""
        if gpu.spec.key == "H200" and gpu.spec.tdp_w == 700.0 and gpu.limit_w >= 700.0:
            return self
        level = gpu.map_w(self.level_w.astype(np.float64))
        level = np.minimum(level, gpu.allowed_w)
        return Timeline(self.start_s, self.kind, level.astype(np.float32))

    @classmethod
    def constant(cls, kind: int, level_w: float) -> Timeline:
        return cls(np.array([-1e9]), np.array([kind], np.uint8), np.array([level_w], np.float32))
