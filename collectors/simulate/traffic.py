"""Arrival processes and token lengths measured on production LLM traffic (the Azure 2023 traces).

Two profiles, each fitted by ``bench/fit_azure_traffic.py`` on one hour of the Azure LLM inference
trace 2023 (Azure Public Dataset, Microsoft, CC-BY 4.0; released with Splitwise, Patel et al., ISCA 2024;
2023-11-16 18:15–19:14 UTC): ``conv`` (19,366 requests of a conversation service) and ``code``
(8,819 requests of a coding service). An endpoint picks one with its ``traffic`` key (default ``conv``).

- Lengths: prompt and output tokens drawn independently (log-length correlation 0.09 in conv, 0.00 in
  code) from the trace's empirical quantiles (inverse CDF, log-linear between the tabulated quantiles),
  scaled so that their medians are the endpoint's ``prompt_median`` / ``output_median``.
- Burstiness within the hour: the rate of each UTC minute is the diurnal curve × a lognormal factor of
  mean 1 and relative sd ``rate_sd`` (the per-minute rate's sd around the hour's linear trend, Poisson
  noise removed); arrivals inside a minute are Poisson. conv: 0.21, code: 1.01.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BURST_SLOT_S = 60.0
"""Length of the slots whose rates fluctuate together (the fit's bin)."""
QUANTILE_LEVELS = np.array(
    [0.0, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
     0.75, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 1.0]
)
PROMPT_MAX = 16_384
OUTPUT_MAX = 2_048


@dataclass(frozen=True)
class TrafficProfile:
    name: str
    prompt_q: np.ndarray
    """Prompt tokens at QUANTILE_LEVELS."""
    output_q: np.ndarray
    rate_sd: float
    """Relative sd of the per-minute arrival rate around its trend (0: a plain Poisson process)."""

    @property
    def prompt_median(self) -> float:
        return float(np.interp(0.5, QUANTILE_LEVELS, self.prompt_q))

    @property
    def output_median(self) -> float:
        return float(np.interp(0.5, QUANTILE_LEVELS, self.output_q))


CONV = TrafficProfile(
    "conv",
    np.array([2, 29, 120, 181, 207, 372, 387, 396, 403, 414, 703, 984, 1020, 1045, 1071, 1097, 1130, 1189,
              1315, 1877, 2735, 4083, 4092, 4142, 4831, 6212, 14050], np.float64),
    np.array([7, 16, 28, 41, 54, 67, 77, 85, 91, 96, 103, 113, 129, 151, 177, 217, 384, 395, 400, 411, 424,
              451, 522, 601, 644, 954, 1000], np.float64),
    0.213,
)
"""Azure conversation trace 2023: prompt median 1,020 (p90 2,735, max 14,050), output median 129 (p90 424)."""
CODE = TrafficProfile(
    "code",
    np.array([3, 17, 44, 75, 147, 232, 385, 578, 770, 938, 1075, 1261, 1469, 1690, 1909, 2164, 2433, 2745,
              3193, 3923, 5194, 7315, 7435, 7436, 7436, 7437, 7437], np.float64),
    np.array([6, 6, 6, 6, 7, 7, 8, 9, 9, 10, 11, 12, 13, 14, 16, 18, 20, 24, 29, 39, 55, 90, 145, 252, 361,
              831, 1899], np.float64),
    1.009,
)
"""Azure code trace 2023: prompt median 1,469 (p90 5,194, cut at 7,437), output median 13 (p90 55, max 1,899)."""
PROFILES = {"conv": CONV, "code": CODE}


def _draw(rng: np.random.Generator, q: np.ndarray, n: int) -> np.ndarray:
    """Inverse CDF of a quantile table, log-linear between its entries."""
    return np.exp(np.interp(rng.random(n), QUANTILE_LEVELS, np.log(q)))


def token_lengths(
    rng: np.random.Generator, profile: TrafficProfile, n: int, prompt_median: float, output_median: float
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output tokens with the profile's shape, scaled to the given medians, capped."""
    prompt = _draw(rng, profile.prompt_q, n) * (prompt_median / profile.prompt_median)
    output = _draw(rng, profile.output_q, n) * (output_median / profile.output_median)
    return (np.clip(np.rint(prompt), 1, PROMPT_MAX).astype(np.int32),
            np.clip(np.rint(output), 1, OUTPUT_MAX).astype(np.int32))
