"""Request arrivals: a diurnal Poisson process (or a replayed trace) and heavy-tailed token lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TROUGH_HOUR = 4.0
"""Local hour of the lowest load; the peak is 12 h later (16:00, mid-afternoon)."""
TROUGH_SHARE = 0.12
"""Rate at the trough as a share of the peak rate (public traces show a ~5–10× day/night swing)."""

PROMPT_SIGMA = 1.0
OUTPUT_SIGMA = 0.85
PROMPT_MAX = 16_384
OUTPUT_MAX = 2_048


@dataclass(frozen=True)
class Arrivals:
    """A real arrival trace for one endpoint, replayed instead of the Poisson process.

    ``offset_s`` is seconds from the start of the simulated window (00:00 UTC of ``start``).
    """

    offset_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.offset_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("Arrivals: offset_s, prompt_tokens and output_tokens must have the same length")


def diurnal_rate_rps(t_s: np.ndarray | float, peak_rps: float, tz_offset_h: float = 0.0) -> np.ndarray:
    """Arrival rate at ``t_s`` seconds after 00:00 UTC: a raised cosine in the endpoint's local time."""
    local_h = (np.asarray(t_s, dtype=np.float64) / 3600.0 + tz_offset_h) % 24.0
    shape = 0.5 - 0.5 * np.cos(2 * np.pi * (local_h - TROUGH_HOUR) / 24.0)
    return peak_rps * (TROUGH_SHARE + (1 - TROUGH_SHARE) * shape)


def poisson_arrivals_s(
    rng: np.random.Generator, windows: list[tuple[float, float]], peak_rps: float, tz_offset_h: float
) -> np.ndarray:
    """Sorted arrival times within ``windows`` by thinning a homogeneous process at the peak rate."""
    out = []
    for lo, hi in windows:
        n = rng.poisson(peak_rps * (hi - lo))
        t = np.sort(rng.uniform(lo, hi, n))
        keep = rng.uniform(0.0, peak_rps, n) < diurnal_rate_rps(t, peak_rps, tz_offset_h)
        out.append(t[keep])
    return np.concatenate(out) if out else np.empty(0)


def token_lengths(
    rng: np.random.Generator, n: int, prompt_median: float, output_median: float
) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal prompt/output lengths, capped, like the Azure LLM inference traces."""
    prompt = np.clip(np.rint(rng.lognormal(np.log(prompt_median), PROMPT_SIGMA, n)), 8, PROMPT_MAX)
    output = np.clip(np.rint(rng.lognormal(np.log(output_median), OUTPUT_SIGMA, n)), 1, OUTPUT_MAX)
    return prompt.astype(np.int32), output.astype(np.int32)


def replay_within(arrivals: Arrivals, windows: list[tuple[float, float]]) -> Arrivals:
    """The part of a replayed trace inside the simulated windows, sorted by offset."""
    t = np.asarray(arrivals.offset_s, dtype=np.float64)
    keep = np.zeros(len(t), bool)
    for lo, hi in windows:
        keep |= (t >= lo) & (t < hi)
    order = np.argsort(t[keep], kind="stable")
    return Arrivals(
        t[keep][order],
        np.maximum(np.asarray(arrivals.prompt_tokens)[keep][order], 1).astype(np.int32),
        np.maximum(np.asarray(arrivals.output_tokens)[keep][order], 1).astype(np.int32),
    )
