"""Static batching in the serving engine: batch formation, padded prefill and whole-batch decode timing,
the inventory keys that choose it, and the energy per token it gives against the captures.

Capture 2 (tests/data/h200_capture_2) was served with static batches padded to their longest prompt; its
energy per token is the validation point of the engine fitted on capture 4 (continuous batching,
tests/data/h200_capture_4 and tests/data/h200-capture-4): nothing is refitted on capture 2.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from collectors.inventory import InventoryError, parse_inventory
from collectors.simulate import calibration, phases, physics, power, simulate
from collectors.simulate.arrivals import Arrivals
from collectors.simulate.serving_engine import STATIC_BATCH_TOKENS, run_engine

DATA = Path(__file__).parent / "data"
MODEL = physics.ServingModel(physics.REFERENCE.gpu, tp=1)


def _prefill_s(size: int, longest: int) -> float:
    """A static batch's prefill: every row padded to the longest prompt (the uncapped H200 runs at full clocks)."""
    return calibration.PREFILL_OVERHEAD_S + MODEL.prefill_compute_s(size * longest, size * longest * longest)


def _run(batching: str, max_batch: int | None = None):
    arr = Arrivals(np.array([0.0, 0.1, 0.2, 0.3, 5.0]), np.array([1000, 2000, 500, 20_000, 100], np.int32),
                   np.array([10, 3, 5, 2, 1], np.int32))
    return run_engine(np.random.default_rng(0), arr, 1, errors=False, model=MODEL, batching=batching, max_batch=max_batch)


def test_static_batches_form_from_the_waiting_queue_and_run_to_their_longest_output():
    """Known answer: request 0 runs alone (nothing else waits at t = 0); requests 1 and 2 waited meanwhile and
    form the next batch, request 3 does not join it (3 × 20,000 padded tokens > the 32,768 budget) and runs
    after its longest output; request 4 arrives to an idle GPU."""
    r = _run("static")
    step1, step2 = MODEL.decode_step_s(1), MODEL.decode_step_s(2)
    end0 = _prefill_s(1, 1000) + 9 * step1
    first12 = end0 + _prefill_s(2, 2000)  # padded: 2 rows of 2,000 tokens, not 2,000 + 500
    end12 = (first12 + 2 * step2, first12 + 4 * step2)  # each ends at its own last token, both slots step
    first3 = end12[1] + _prefill_s(1, 20_000)  # the next batch starts when the longest output is done
    first4 = 5.0 + _prefill_s(1, 100)
    np.testing.assert_allclose(r.prefill_start_s, [0.0, end0, end0, end12[1], 5.0], rtol=1e-9)
    np.testing.assert_allclose(r.first_token_s, [_prefill_s(1, 1000), first12, first12, first3, first4], rtol=1e-9)
    np.testing.assert_allclose(r.end_s, [end0, *end12, first3 + step1, first4], rtol=1e-9)
    assert 3 * 20_000 > STATIC_BATCH_TOKENS >= 2 * 2000
    tl = r.timeline
    kind_at = lambda t: int(tl.kind[np.searchsorted(tl.start_s, t, side="right") - 1])  # noqa: E731
    assert kind_at((first12 + end12[1]) / 2) == phases.DECODE
    assert kind_at((first3 + step1 + 5.0) / 2) == phases.LOADED
    assert kind_at(5.0 + 0.03) == phases.LOADED  # host-side work first: the GPU stays where it was
    assert kind_at((5.0 + calibration.PREFILL_ONSET_S + first4) / 2) == phases.PREFILL  # then it computes


def test_max_batch_caps_a_static_batch_and_continuous_running():
    """``max_batch: 1`` serves the same requests one at a time in arrival order; under continuous batching
    it caps the requests running at once. Continuous stays the default."""
    one = _run("static", max_batch=1)
    assert len(np.unique(one.prefill_start_s)) == 5
    np.testing.assert_allclose(one.prefill_start_s[1:4], one.end_s[0:3], rtol=1e-12)
    default, explicit = _run("continuous"), run_engine(
        np.random.default_rng(0), Arrivals(np.array([0.0, 0.1, 0.2, 0.3, 5.0]), np.array([1000, 2000, 500, 20_000, 100], np.int32),
                                           np.array([10, 3, 5, 2, 1], np.int32)), 1, errors=False, model=MODEL)
    np.testing.assert_array_equal(default.end_s, explicit.end_s)
    capped = _run("continuous", max_batch=1)
    order = np.argsort(capped.first_token_s)
    assert np.all(capped.first_token_s[order][1:] >= capped.end_s[order][:-1] - 1e-12)  # never two running
    with pytest.raises(ValueError, match="batching must be one of continuous, static"):
        _run("dynamic")


def _fleet(**endpoint) -> dict:
    return {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [
        {"name": "h0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}],
         "endpoints": [{"name": "ep", "gpus": [0], "tz_offset_h": -8, "peak_rps": 3.0, **endpoint}]}]}]}]}


def test_inventory_batching_keys_are_checked_and_drive_the_simulator(tmp_path):
    with pytest.raises(InventoryError, match="batching must be one of continuous, static .*did you mean 'static'"):
        parse_inventory(_fleet(batching="statc"))
    with pytest.raises(InventoryError, match="max_batch"):
        parse_inventory(_fleet(max_batch=0))
    path = tmp_path / "static.yaml"
    path.write_text(yaml.safe_dump(_fleet(batching="static", max_batch=4)))
    simulate(tmp_path / "d", start=dt.date(2026, 12, 1), fleet=path, hours=0.05)
    req = pl.read_parquet(str(tmp_path / "d" / "requests" / "**" / "*.parquet"))
    batches = (req.group_by("prefill_start_ts").agg(pl.len().alias("n"), pl.col("end_ts").max().alias("done"))
               .sort("prefill_start_ts"))
    assert len(batches) > 10 and batches["n"].max() <= 4 and batches["n"].max() > 1
    # one batch at a time: the next starts only after the previous one's last token
    assert (batches["prefill_start_ts"][1:] >= batches["done"][:-1]).all()


# --- energy per token against the captures ---------------------------------------------------------

def _requests(path: Path) -> dict[str, np.ndarray]:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    return {k: np.array([int(r[k]) for r in rows]) for k in
            ("arrival_ns", "prefill_start_ns", "first_token_ns", "end_ns", "prompt_tokens", "output_tokens")}


def _measured(t_s, w, req) -> tuple[float, float]:
    return calibration.joules_per_token(t_s, w, req["prefill_start_ns"] / 1e9, req["first_token_ns"] / 1e9,
                                        req["end_ns"] / 1e9, req["prompt_tokens"], req["output_tokens"])


def _simulated(req, batching: str) -> tuple[float, float]:
    """The capture's arrivals and token counts through the engine on one H200, sampled every 20 ms."""
    t0 = req["arrival_ns"].min()
    arr = Arrivals((req["arrival_ns"] - t0) / 1e9, req["prompt_tokens"].astype(np.int32), req["output_tokens"].astype(np.int32))
    res = run_engine(np.random.default_rng(0), arr, 1, errors=False, batching=batching)
    t = np.arange(-1.0, res.end_s.max() + 1.0, 0.02)
    _, w = power._instant_w(np.random.default_rng(0), res.timeline, t, 1.0, calibration.POWER_QUANTUM_W)
    return calibration.joules_per_token(t, w, res.prefill_start_s, res.first_token_s, res.end_s,
                                        res.prompt_tokens, res.output_tokens)


CAPTURE_J = {"h200-capture-4": (0.0210, 0.509), "h200-capture-2": (0.0459, 2.651)}
"""J per prompt token and per output token on the full 20 ms driver buffers (bench/calibrate_simulator.py)."""


def test_energy_per_token_within_15_percent_of_both_captures():
    """Capture 4 (fit, continuous batching) and capture 2 (validation, static batching, nothing refitted):
    simulated J per prompt and per output token within 15 % of the measured. Capture 2 through the
    continuous engine misses by ~45 % / ~57 %: its energy is its batching's."""
    req4 = _requests(DATA / "h200_capture_4" / "requests.csv")
    buf = (pl.read_parquet(str(DATA / "h200-capture-4" / "power" / "**" / "*.parquet"), hive_partitioning=False)
           .filter((pl.col("source").cast(pl.Utf8) == "nvml-buffer") & pl.col("power_w").is_not_null())
           .select(pl.col("ts").dt.epoch("ns").alias("t"), pl.col("power_w").cast(pl.Float64).alias("w")).sort("t"))
    measured4 = _measured(buf["t"].to_numpy() / 1e9, buf["w"].to_numpy(), req4)
    req2 = _requests(DATA / "h200_capture_2" / "requests.csv")
    with open(DATA / "h200_capture_2" / "power_100ms.csv") as fh:
        rows = list(csv.DictReader(fh))
    measured2 = _measured(np.array([int(r["t_ns"]) for r in rows]) / 1e9,
                          np.array([int(r["power_instant_mw"]) for r in rows]) / 1e3, req2)
    # the slices give what the full buffers give (capture 2's 100 ms instant samples within 6 %)
    np.testing.assert_allclose(measured4, CAPTURE_J["h200-capture-4"], rtol=0.02)
    np.testing.assert_allclose(measured2, CAPTURE_J["h200-capture-2"], rtol=0.06)
    for name, req, batching in (("h200-capture-4", req4, "continuous"), ("h200-capture-2", req2, "static")):
        sim = _simulated(req, batching)
        gaps = np.array(sim) / np.array(CAPTURE_J[name]) - 1
        assert np.all(np.abs(gaps) <= 0.15), (name, sim, gaps)
    wrong = np.array(_simulated(req2, "continuous")) / np.array(CAPTURE_J["h200-capture-2"]) - 1
    assert np.all(wrong < -0.3), wrong
