"""The simulator's traffic profiles against the Azure 2023 traces they were fitted on (tests/data/azure)."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
from pathlib import Path

import numpy as np
import pytest

from collectors.inventory import InventoryError
from collectors.simulate import simulate, traffic
from collectors.simulate.arrivals import poisson_arrivals_s

DATA = Path(__file__).parent / "data" / "azure"


def _trace(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with gzip.open(DATA / f"AzureLLMInferenceTrace_{name}.csv.gz", "rt", newline="") as f:
        rows = list(csv.reader(f))[1:]
    t = np.sort([dt.datetime.fromisoformat(r[0][:26]).replace(tzinfo=dt.UTC).timestamp() for r in rows])
    return t - t[0], np.array([int(r[1]) for r in rows]), np.array([int(r[2]) for r in rows])


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    return float(np.max(np.abs(np.searchsorted(np.sort(a), grid, side="right") / len(a)
                               - np.searchsorted(np.sort(b), grid, side="right") / len(b))))


def _dispersion(t: np.ndarray, bin_s: float) -> float:
    c = np.bincount((t // bin_s).astype(int))[:-1]
    return float(c.var() / c.mean())


@pytest.fixture(scope="module", params=["conv", "code"])
def trace(request):
    return request.param, *_trace(request.param)


def test_quantile_tables_are_the_traces_quantiles(trace):
    name, _, prompt, output = trace
    prof = traffic.PROFILES[name]
    assert np.array_equal(prof.prompt_q, np.quantile(prompt, traffic.QUANTILE_LEVELS, method="inverted_cdf"))
    assert np.array_equal(prof.output_q, np.quantile(output, traffic.QUANTILE_LEVELS, method="inverted_cdf"))


def test_sampled_lengths_match_the_trace(trace):
    """Unscaled (the trace's own medians): two-sample KS against the real lengths."""
    name, _, prompt, output = trace
    prof = traffic.PROFILES[name]
    p, o = traffic.token_lengths(np.random.default_rng(7), prof, 50_000, float(np.median(prompt)), float(np.median(output)))
    assert _ks(p, prompt) < 0.05 and _ks(o, output) < 0.05
    lognormal = np.rint(np.random.default_rng(7).lognormal(np.log(np.median(prompt)), 1.0, 50_000))
    assert _ks(lognormal, prompt) > 0.1, "the previous lognormal model was measurably further off"


def test_lengths_scale_to_the_endpoint_medians_and_caps():
    p, o = traffic.token_lengths(np.random.default_rng(1), traffic.CODE, 40_000, 3000.0, 130.0)
    assert np.median(p) == pytest.approx(3000, rel=0.05) and np.median(o) == pytest.approx(130, rel=0.08)
    assert p.max() <= traffic.PROMPT_MAX and o.max() <= traffic.OUTPUT_MAX and min(p.min(), o.min()) >= 1


def test_burstiness_within_the_hour_matches_the_trace_at_a_minute(trace):
    """Per-minute rate sd and the counts' dispersion at 10 s and 60 s, at the trace's mean rate (flat day)."""
    name, t, _, _ = trace
    prof = traffic.PROFILES[name]
    rate = len(t) / t[-1]
    sims = [poisson_arrivals_s(np.random.default_rng(s), [(0.0, 3600.0)], rate, 0.0, prof.rate_sd, trough_share=1.0)
            for s in range(8)]
    for bin_s in (10, 60):
        real = _dispersion(t, bin_s)
        sim = float(np.median([_dispersion(x, bin_s) for x in sims]))
        lo = 0.25 if (name, bin_s) == ("code", 10) else 0.6  # code's bursts are sub-minute: under-modelled at 10 s
        assert lo * real < sim < 1.6 * real, (name, bin_s, real, sim)
    plain = poisson_arrivals_s(np.random.default_rng(0), [(0.0, 3600.0)], rate, 0.0, 0.0, trough_share=1.0)
    assert _dispersion(plain, 60) < 2 < _dispersion(t, 60), "a plain Poisson process is not as bursty as the trace"


def test_arrivals_keep_the_diurnal_mean():
    t = poisson_arrivals_s(np.random.default_rng(3), [(0.0, 86_400.0)], 2.0, 0.0, traffic.CONV.rate_sd)
    assert len(t) == pytest.approx(86_400 * 2.0 * 0.56, rel=0.03)
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < 86_400


def test_unknown_traffic_profile_is_an_inventory_error(tmp_path):
    fleet = tmp_path / "f.yaml"
    fleet.write_text(
        "fleets:\n- name: f\n  clusters:\n  - name: c\n    hosts:\n    - name: h\n      role: inference\n"
        "      gpus: [{index: 0, tdp_w: 700}]\n      endpoints: [{name: e, gpus: [0], traffic: chat}]\n"
    )
    with pytest.raises(InventoryError, match="traffic must be one of conv, code"):
        simulate(tmp_path / "d", start=dt.date(2026, 11, 30), fleet=fleet, hours=0.01)
    assert not (tmp_path / "d" / "inventory.yaml").exists()
