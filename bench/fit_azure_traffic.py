"""Fit the simulator's traffic profiles (token lengths, burstiness within the hour) on the Azure 2023 traces.

    python bench/fit_azure_traffic.py [--data tests/data/azure]

Reads the two one-hour traces (Azure Public Dataset, Microsoft, CC-BY 4.0: ``AzureLLMInferenceTrace_conv``
and ``_code``, 2023-11-16 18:15–19:14 UTC) and prints, per trace: the prompt and output token quantiles
at ``traffic.QUANTILE_LEVELS`` (the tables in ``collectors/simulate/traffic.py``), the inter-arrival CV,
the index of dispersion of counts (variance / mean) in 1, 10 and 60 s bins, and ``rate_sd``: the sd of
the per-minute rate around a linear trend over the hour beyond Poisson noise. Then the same statistics of
the simulator's arrivals for that profile at the trace's mean rate (10 seeds of one hour), and the
two-sample KS statistic of simulated vs real lengths: the table in docs/simulator.md ("Traffic within
the hour").
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from collectors.simulate import traffic  # noqa: E402
from collectors.simulate.arrivals import poisson_arrivals_s  # noqa: E402


def read_trace(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival s from the first request, prompt tokens, output tokens), sorted by arrival."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))[1:]
    t = np.array([dt.datetime.fromisoformat(r[0][:26]).replace(tzinfo=dt.UTC).timestamp() for r in rows])
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return t, np.array([int(r[1]) for r in rows])[order], np.array([int(r[2]) for r in rows])[order]


def dispersion(t: np.ndarray, bin_s: float) -> float:
    """Variance / mean of the counts in ``bin_s`` bins (1 for a Poisson process); the partial last bin dropped."""
    c = np.bincount((t // bin_s).astype(int))[:-1]
    return float(c.var() / c.mean())


def rate_sd(t: np.ndarray, slot_s: float = traffic.BURST_SLOT_S) -> float:
    """Relative sd of the per-slot rate around a linear trend, Poisson noise removed."""
    c = np.bincount((t // slot_s).astype(int))[:-1].astype(float)
    x = np.arange(len(c))
    trend = np.polyval(np.polyfit(x, c, 1), x)
    extra = np.mean((c - trend) ** 2) - np.mean(trend)
    return float(np.sqrt(max(extra, 0.0)) / c.mean())


def ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def stats(t: np.ndarray) -> dict:
    g = np.diff(t)
    return {"requests": len(t), "rate_rps": round(len(t) / t[-1], 3), "gap_cv": round(float(g.std() / g.mean()), 2),
            **{f"dispersion_{b}s": round(dispersion(t, b), 2) for b in (1, 10, 60)},
            "rate_sd_per_min": round(rate_sd(t), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / "tests" / "data" / "azure")
    args = ap.parse_args()
    out = {}
    for name in ("conv", "code"):
        t, prompt, output = read_trace(args.data / f"AzureLLMInferenceTrace_{name}.csv.gz")
        real = stats(t)
        prof = traffic.PROFILES[name]
        sims, ks_p, ks_o = [], [], []
        for seed in range(10):
            rng = np.random.default_rng(seed)
            # a flat day (trough share 1) at the trace's mean rate: only the within-hour model is compared
            ts = poisson_arrivals_s(rng, [(0.0, 3600.0)], real["rate_rps"], 0.0, prof.rate_sd, trough_share=1.0)
            sims.append(stats(ts))
            p, o = traffic.token_lengths(rng, prof, 20_000, float(np.median(prompt)), float(np.median(output)))
            ks_p.append(ks(p, prompt))
            ks_o.append(ks(o, output))
        sim = {k: round(float(np.median([s[k] for s in sims])), 3) for k in sims[0]}
        out[name] = {
            "real": real, "simulated_median_of_10": sim,
            "ks_prompt": round(float(np.median(ks_p)), 3), "ks_output": round(float(np.median(ks_o)), 3),
            "prompt_quantiles": [int(v) for v in np.quantile(prompt, traffic.QUANTILE_LEVELS, method="inverted_cdf")],
            "output_quantiles": [int(v) for v in np.quantile(output, traffic.QUANTILE_LEVELS, method="inverted_cdf")],
            "prompt_median": float(np.median(prompt)), "output_median": float(np.median(output)),
            "log_length_corr": round(float(np.corrcoef(np.log(prompt), np.log(output))[0, 1]), 3),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
