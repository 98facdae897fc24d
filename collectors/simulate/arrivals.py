"""Request arrivals: a diurnal, minute-by-minute bursty Poisson process (or a replayed trace); lengths in :mod:`traffic`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors.simulate import traffic

TROUGH_HOUR = 4.0
"""Local hour of the lowest load; the peak is 12 h later (16:00, mid-afternoon)."""
TROUGH_SHARE = 0.12
"""Rate at the trough as a share of the peak rate: a per-endpoint peak/trough of 8.3. Assumed, not cited:
no published characterization found states the ratio as a number (docs/simulator.md, "Arrivals")."""



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


def diurnal_rate_rps(
    t_s: np.ndarray | float, peak_rps: float, tz_offset_h: float = 0.0, trough_share: float | None = None
) -> np.ndarray:
    """Arrival rate at ``t_s`` seconds after 00:00 UTC: a raised cosine in the endpoint's local time,
    from ``trough_share`` × the peak at TROUGH_HOUR to the peak 12 h later."""
    share = TROUGH_SHARE if trough_share is None else trough_share
    local_h = (np.asarray(t_s, dtype=np.float64) / 3600.0 + tz_offset_h) % 24.0
    shape = 0.5 - 0.5 * np.cos(2 * np.pi * (local_h - TROUGH_HOUR) / 24.0)
    return peak_rps * (share + (1 - share) * shape)


def poisson_arrivals_s(
    rng: np.random.Generator,
    windows: list[tuple[float, float]],
    peak_rps: float,
    tz_offset_h: float,
    rate_sd: float = 0.0,
    trough_share: float | None = None,
) -> np.ndarray:
    """Sorted arrival times in ``windows``: per UTC minute (``traffic.BURST_SLOT_S``) a Poisson count at
    the diurnal rate × a lognormal factor of mean 1 and relative sd ``rate_sd`` (the burstiness within
    the hour, ``traffic.TrafficProfile.rate_sd``), the arrivals uniform inside the minute."""
    slot = traffic.BURST_SLOT_S
    s2 = float(np.log1p(rate_sd**2))
    out = []
    for lo, hi in windows:
        edges = np.arange(np.floor(lo / slot) * slot, hi + slot, slot)
        a = np.clip(edges[:-1], lo, hi)
        b = np.clip(edges[1:], lo, hi)
        keep = b > a
        a, b = a[keep], b[keep]
        rate = diurnal_rate_rps((a + b) / 2, peak_rps, tz_offset_h, trough_share)
        factor = np.exp(rng.normal(-s2 / 2, np.sqrt(s2), len(a))) if rate_sd > 0 else 1.0
        n = rng.poisson(rate * (b - a) * factor)
        out.append(np.sort(np.repeat(a, n) + rng.random(int(n.sum())) * np.repeat(b - a, n)))
    return np.concatenate(out) if out else np.empty(0)


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
