"""The serving engine behind an endpoint (inventory key ``engine``) changes its step times and decode power.

Known answers: the capture's engine (the default) steps as capture 4's plain PyTorch loop did; vLLM steps
at the bandwidth bound plus one small fixed cost, and its decode power follows the bytes it moves. Against
a real vLLM run (the A100 smoke run, tests/data/vllm/run-1784415083: requests and nvidia-smi power) the
simulator with ``engine: vllm`` gives its energy per output token within 10 %, where the capture's engine
is 50 % off.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from collectors.simulate import calibration, physics, power, simulate
from collectors.simulate.arrivals import Arrivals
from collectors.simulate.serving_engine import run_engine

SMOKE = Path(__file__).parent / "data" / "vllm" / "run-1784415083"
A100 = physics.GpuPower.of("NVIDIA A100-SXM4-80GB", None, None)
H100 = physics.GpuPower.of("NVIDIA H100 80GB HBM3", None, None)
KV_8B = 2 * 8 * 128 * 32 * 2
"""An 8B decoder's KV cache per token of context: K and V, 8 heads of 128, 32 layers, bf16 (131 kB)."""


def test_engine_key_names_the_engine():
    assert physics.engine_for("vllm") is physics.VLLM and physics.engine_for(" vLLM ") is physics.VLLM
    for other in (None, "", "sglang", "megatron"):  # absent or not calibrated: the capture's engine
        assert physics.engine_for(other) is physics.CAPTURE
    assert physics.serving_model({}, 1, H100, 1000, 160) == physics.serving_model({"engine": "sglang"}, 1, H100, 1000, 160)
    assert physics.serving_model({"engine": "vllm"}, 1, H100, 1000, 160).engine is physics.VLLM


def test_step_time_law_per_engine():
    """Decode step = the engine's fixed costs + (weights + running × context × KV bytes) / (bandwidth × 0.75)."""
    cap = physics.ServingModel(H100, context_tokens=768.0)
    vllm = physics.ServingModel(H100, context_tokens=768.0, engine=physics.VLLM)
    bw = 3.35e12 * 0.75
    for running in (1, 64):
        move = (16e9 + running * 768 * KV_8B) / bw
        assert vllm.decode_step_s(running) == pytest.approx(0.0015 + move, rel=1e-6)
        # the capture's loop: 32 layers × (1.47 ms + 2.5 µs × running) of fixed cost on top
        assert cap.decode_step_s(running) - move == pytest.approx(32 * (1.4746e-3 + 2.5e-6 * running), rel=0.01)
    assert vllm.decode_step_s(1) == pytest.approx(0.00791, abs=1e-5)  # 1.5 ms + 16.1 GB at 2.51 TB/s
    assert vllm.decode_step_s(64) == pytest.approx(0.01043, abs=1e-5)
    assert cap.decode_step_s(1) / vllm.decode_step_s(1) > 6
    # prefill: the same FLOPs, the engine's fixed cost per batch
    assert vllm.prefill_overhead_s == 0.0015 and cap.prefill_overhead_s == pytest.approx(0.0584)
    assert vllm.prefill_compute_s(1500, 1500**2) == cap.prefill_compute_s(1500, 1500**2)
    # tensor parallel: each GPU streams 1/tp of the bytes, the fixed cost stays
    tp4 = physics.ServingModel(H100, tp=4, context_tokens=768.0, engine=physics.VLLM)
    assert tp4.decode_step_s(1) == pytest.approx(0.0015 + (16e9 + 768 * KV_8B) / (4 * bw) + tp4._allreduce_s(1), rel=1e-6)


def test_vllm_decode_power_from_the_bytes_it_moves():
    """loaded + 170 pJ per byte per second + the tensor cores' share: the smoke run's 293 W on the A100;
    more bytes per second on an H100 draw more, and the simulator's samples average to the level asked."""
    smoke = physics.ServingModel(A100, 8.2, 8.2, context_tokens=4936.0, engine=physics.VLLM)
    step = smoke.decode_step_s(1)
    assert step == pytest.approx(0.01267, rel=0.01)  # the smoke run's measured time per output token
    assert smoke.decode_power_w(1) == pytest.approx(293.2, rel=0.02)
    mem, compute = smoke.decode_utilisation(1, step)
    assert mem == pytest.approx((16.4e9 + 4936 * smoke.kv_bytes_per_token) / (step * A100.spec.mem_bytes_s), rel=1e-6)
    assert compute < 0.01
    h100 = physics.ServingModel(H100, context_tokens=768.0, engine=physics.VLLM)
    mem, compute = h100.decode_utilisation(64, h100.decode_step_s(64))
    expect = H100.map_w(calibration.LOADED_W) + 170e-12 * mem * 3.35e12 + 625.0 * physics.COMPUTE_W_PER_UTILISATION * compute
    assert h100.decode_power_w(64) == pytest.approx(expect, rel=1e-6)
    assert smoke.decode_power_w(1) < h100.decode_power_w(1) < h100.decode_power_w(64) < 700
    # the level written sits below the mean so that the sampler's clipped lognormal spread averages to it
    level = physics.decode_level_for_mean(293.2, A100.ceiling_w)
    z = np.random.default_rng(0).standard_normal(400_000)
    assert np.minimum(level * np.exp(calibration.DECODE_LOG_SD * z), A100.ceiling_w).mean() == pytest.approx(293.2, rel=0.005)


def _smoke() -> dict[str, np.ndarray]:
    """The smoke run's requests (first token = arrival + ttft, end = first + itl × (output − 1)) and its
    nvidia-smi power (local wall time of a UTC−7 zone)."""
    req = json.loads((SMOKE / "requests.json").read_text())
    a, ttft, itl = (np.array(req[k], float) for k in ("request_timestamps", "ttfts", "itls"))
    prompt, output = np.array(req["input_lens"]), np.array(req["output_lens"])
    with open(SMOKE / "power.csv") as fh:
        rows = list(csv.reader(fh))[1:]
    tz = dt.timezone(dt.timedelta(hours=-7))
    t = np.array([dt.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=tz).timestamp() for r in rows])
    return {"t": t, "w": np.array([float(r[3]) for r in rows]), "arrival": a, "first": a + ttft,
            "end": a + ttft + itl * (output - 1), "prompt": prompt, "output": output}


def _simulated(s: dict[str, np.ndarray], engine: str | None) -> tuple[float, float]:
    """The run's arrivals and token counts through the engine on one 400 W A100, sampled every 20 ms."""
    model = physics.serving_model({"params_b": 8.2, "tp": 1, "engine": engine}, 1, A100,
                                  float(np.median(s["prompt"])), float(np.median(s["output"])))
    arr = Arrivals(s["arrival"] - s["arrival"][0], s["prompt"].astype(np.int32), s["output"].astype(np.int32))
    res = run_engine(np.random.default_rng(0), arr, 1, errors=False, model=model)
    t = np.arange(-1.0, res.end_s.max() + 1.0, 0.02)
    _, w = power._instant_w(np.random.default_rng(0), res.timeline, t, 1.0, calibration.POWER_QUANTUM_W, A100)
    return calibration.joules_per_token(t, w, res.prefill_start_s, res.first_token_s, res.end_s, res.prompt_tokens, res.output_tokens)


def test_a100_smoke_energy_per_output_token_with_engine_vllm():
    """Measured 3.89 J per output token (0.029 J per prompt token); engine vllm within 10 % of both,
    the capture's engine +50 % per output token (its 59 ms steps at ≈ 120 W)."""
    s = _smoke()
    measured = calibration.joules_per_token(s["t"], s["w"], s["arrival"], s["first"], s["end"], s["prompt"], s["output"])
    np.testing.assert_allclose(measured, (0.0290, 3.89), rtol=0.01)
    vllm = np.array(_simulated(s, "vllm")) / np.array(measured) - 1
    assert np.all(np.abs(vllm) <= 0.10), vllm
    capture = np.array(_simulated(s, None)) / np.array(measured) - 1
    assert capture[1] > 0.4, capture


def _fleet(**endpoint) -> dict:
    gpus = [{"index": 0, "tdp_w": 700, "model": "NVIDIA H100 80GB HBM3"}]
    return {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [
        {"name": "h0", "role": "inference", "gpus": gpus,
         "endpoints": [{"name": "ep", "gpus": [0], "tz_offset_h": -8, "peak_rps": 3.0, **endpoint}]}]}]}]}


@pytest.mark.parametrize(("engine", "ms_per_token"), [(None, (55.0, 120.0)), ("vllm", (7.5, 15.0))])
def test_inventory_engine_key_drives_the_simulator(tmp_path, engine, ms_per_token):
    """An H100 endpoint's requests decode at the capture loop's ≥ 55 ms per token, or vLLM's ≈ 8–9 ms (both
    more with the prefills that pause decode)."""
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_fleet(**({"engine": engine} if engine else {}))))
    simulate(tmp_path / "d", start=dt.date(2026, 12, 1), fleet=path, hours=0.02)
    req = (pl.read_parquet(str(tmp_path / "d" / "requests" / "**" / "*.parquet"))
           .filter((pl.col("output_tokens") > 20) & (pl.col("status") == "ok")))
    per_token_ms = ((req["end_ts"] - req["first_token_ts"]).dt.total_microseconds() / 1e3 / (req["output_tokens"] - 1)).median()
    assert len(req) > 20
    assert ms_per_token[0] < per_token_ms < ms_per_token[1], per_token_ms
