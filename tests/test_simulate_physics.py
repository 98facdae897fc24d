"""The simulator's physics: GPU models, model sizes, tensor parallelism and power limits behave like real ones.

Known answers: a bigger model on more GPUs costs more energy per output token, but energy per token is
not proportional to the GPU count; a 400 W A100 stays within the ceiling real A100s show (≈ 500 W) and
its 1 s average within 1.04 × 400 W; every GPU of every fleet passes the pipeline's ERROR check
`power_within_bounds` (sql/power_1s/checks/power_within_bounds.sql: within [0, 2 × TDP]).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml

from collectors.gpu_specs import KNOWN_TDP_W, spec_for
from collectors.simulate import physics, simulate, traffic
from collectors.simulate.arrivals import Arrivals
from collectors.simulate.serving_engine import run_engine

DAY = dt.date(2026, 11, 30)


def test_gpu_names_as_nvml_reports_them():
    assert spec_for("NVIDIA H100 80GB HBM3").key == "H100"
    assert spec_for("NVIDIA A100-SXM4-80GB").key == "A100"  # not the A10
    assert spec_for("NVIDIA L40S").key == "L40S"  # not the L4
    assert spec_for("NVIDIA H200").tdp_w == 700 and spec_for("NVIDIA B200").tdp_w == 1000
    assert spec_for("Tesla K80") is None and spec_for(None) is None
    assert KNOWN_TDP_W == {"H200": 700, "H100": 700, "B200": 1000, "A100": 400, "L40S": 350, "L4": 72, "A10": 150}


def _arrivals(rps: float, seconds: float, seed: int = 1) -> Arrivals:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rps, int(rps * seconds)))
    return Arrivals(t, *traffic.token_lengths(rng, traffic.PROFILES["conv"], len(t), 1000, 160))


def _energy_j(tl, hi: float) -> float:
    start = np.clip(tl.start_s, 0.0, hi)
    end = np.clip(np.r_[tl.start_s[1:], hi], 0.0, hi)
    return float(np.sum(tl.level_w * (end - start)))


def _j_per_output_token(model: physics.ServingModel, n_gpus: int, arr: Arrivals) -> float:
    r = run_engine(np.random.default_rng(0), arr, n_gpus, errors=False, model=model)
    hi = float(r.end_s.max())
    return sum(_energy_j(r.timeline_of(k), hi) for k in range(n_gpus)) / float(r.output_tokens.sum())


def test_bigger_model_on_more_gpus_costs_more_per_token_but_not_in_proportion():
    arr = _arrivals(2.0, 600)
    h100 = physics.GpuPower.of("NVIDIA H100 80GB HBM3", 700, None)
    small = _j_per_output_token(physics.ServingModel(h100, tp=1), 1, arr)
    big = _j_per_output_token(physics.ServingModel(h100, 70, 70, tp=4), 4, arr)
    assert big > 2 * small, (big, small)
    by_gpus = {n: _j_per_output_token(physics.ServingModel(h100, tp=n), n, arr) for n in (1, 2, 4, 8)}
    # the same 8B at the same load: more GPUs cost more, far less than in proportion (each moves 1/n of the weights)
    assert by_gpus[1] < by_gpus[2] < by_gpus[4] < by_gpus[8]
    assert by_gpus[8] / by_gpus[1] < 6.0, by_gpus  # linear would be 8
    assert by_gpus[2] / by_gpus[1] < 1.75, by_gpus


def test_default_endpoint_keeps_the_calibrated_step_times():
    """No model keys: an 8B bf16 decoder on one H200 steps as capture 4 did (51.6 ms + 0.161 ms × running)."""
    ref = physics.REFERENCE
    for running in (1, 32, 128):
        assert ref.decode_step_s(running) == pytest.approx(0.0516 + 0.000161 * running, rel=0.01)
    assert ref.prefill_compute_s(1500, 1500**2) == pytest.approx(21e-6 * 1500, rel=0.05)
    assert ref.decode_busy_ratio(20) == pytest.approx(1.0)


def _host(name: str, model: str, tdp: float, role: str = "inference", **extra) -> dict:
    host = {"name": name, "role": role, "gpus": [{"index": i, "tdp_w": tdp, "model": model} for i in range(4)], **extra}
    if role == "inference":
        host["endpoints"] = [{"name": f"{name}-ep", "gpus": [0, 1, 2, 3], "tz_offset_h": -8, "peak_rps": 3.0, "tp": 2}]
    else:
        host["jobs"] = [{"name": f"{name}-job", "gpus": [0, 1, 2, 3]}]
    return host


def _mixed_fleet(path: Path) -> Path:
    hosts = [
        _host("a100-inf", "NVIDIA A100-SXM4-80GB", 400),
        _host("a100-trn", "NVIDIA A100-SXM4-80GB", 400, role="training"),
        _host("h100-inf", "NVIDIA H100 80GB HBM3", 700),
        _host("h200-trn", "NVIDIA H200", 700, role="training"),
    ]
    path.write_text(yaml.safe_dump({"fleets": [{"name": "mixed", "clusters": [{"name": "c0", "hosts": hosts}]}]}))
    return path


def _per_gpu(data: Path, fleet: str | Path) -> list[tuple]:
    """Per GPU: TDP, max instantaneous power, max 1 s average, the limit written, and whether it fails
    the pipeline's power_within_bounds condition."""
    simulate(data, start=DAY, fleet=fleet, hours=0.08, shape="simple")
    con = duckdb.connect()
    return con.execute(
        f"""
        SELECT host, gpu, max(power_w), max(power_avg_w), max(power_limit_w), min(power_w)
        FROM read_parquet('{data}/power/**/*.parquet') GROUP BY ALL ORDER BY ALL
        """
    ).fetchall()


def test_a100_stays_within_its_ceiling_and_its_limit(tmp_path):
    rows = {(h, g): r for h, g, *r in _per_gpu(tmp_path / "d", _mixed_fleet(tmp_path / "fleet.yaml"))}
    for host in ("a100-inf", "a100-trn"):
        for g in range(4):
            mx, mx_avg, limit, _ = rows[(host, g)]
            assert limit == 400.0
            assert mx <= 500.0, (host, g, mx)
            assert mx_avg <= 1.04 * 400.0, (host, g, mx_avg)
    # the A100's training step sits near its TDP, not at an H200's 700 W
    assert 330 < rows[("a100-trn", 0)][1] <= 416


@pytest.mark.parametrize("fleet", ["tiny", "demo", "serving", "mixed"])
def test_power_within_bounds_on_every_fleet(tmp_path, fleet):
    target = _mixed_fleet(tmp_path / "fleet.yaml") if fleet == "mixed" else fleet
    rows = _per_gpu(tmp_path / "d", target)
    tdp = {(h, g.index): g.tdp_w for h, gpus in _tdps(target) for g in gpus}
    for host, gpu, mx, mx_avg, limit, mn in rows:
        assert 0 <= mn and mx <= 2 * tdp[(host, gpu)], (host, gpu, mx)
        assert mx_avg <= 1.04 * limit, (host, gpu, mx_avg, limit)


def _tdps(fleet):
    from collectors.simulate.fleets import resolve_fleet

    return [(h.name, h.gpus) for _, _, h in resolve_fleet(fleet).iter_hosts()]


def test_a_power_cap_holds_the_1s_average_and_slows_prefill_by_the_clock_law(tmp_path):
    """The same 8B endpoint on H100s uncapped (700 W) and capped at 400 W, same arrivals and seed: the
    capped GPUs' 1 s average stays ≤ 1.04 × 400 W, and each prefill's GPU part takes 1 / clock longer,
    clock = ((allowed − idle) / (plateau − idle))^(1/3)."""
    arr = _arrivals(0.5, 900)
    runs = {}
    for limit in (700.0, 400.0):
        gpu = physics.GpuPower.of("NVIDIA H100 80GB HBM3", 700, limit)
        runs[limit] = (gpu, run_engine(np.random.default_rng(3), arr, 1, errors=False, model=physics.ServingModel(gpu, tp=1)))
    (g700, free), (g400, capped) = runs[700.0], runs[400.0]
    overhead = 0.0584

    def slowdown(r, gpu) -> np.ndarray:
        """Per prefill batch of one request: its GPU time over what the uncapped GPU needs for it."""
        starts, counts = np.unique(r.prefill_start_s, return_counts=True)
        one = np.isin(r.prefill_start_s, starts[counts == 1])
        p = r.prompt_tokens[one].astype(float)
        uncapped = physics.ServingModel(g700, tp=1).prefill_compute_s(p, p * p)
        return ((r.first_token_s - r.prefill_start_s)[one] - overhead) / uncapped

    assert np.allclose(slowdown(free, g700), 1.0)
    slow = slowdown(capped, g400)
    assert len(slow) > 100
    plateau = g700.map_w(np.array([600.0, 900.0]))  # the range prefill levels are drawn in (phases.PREFILL_W)
    law = [1 / g400.clock(float(p)) for p in plateau]
    assert law[0] > 1.05  # a 400 W cap does slow a compute-bound prefill
    assert np.all((slow >= law[0] - 1e-6) & (slow <= law[1] + 1e-6)), (slow.min(), slow.max(), law)
    # decode is memory-bound: it stays below the cap, its steps hardly change
    step = lambda r: np.median((r.end_s - r.first_token_s) / np.maximum(r.output_tokens - 1, 1))  # noqa: E731
    assert step(capped) / step(free) < 1.05

    fleet = {"fleets": [{"name": "caps", "clusters": [{"name": "c0", "hosts": [
        {"name": name, "role": "inference", "power_limit_w": limit,
         "gpus": [{"index": i, "tdp_w": 700, "model": "NVIDIA H100 80GB HBM3"} for i in range(2)],
         "endpoints": [{"name": f"{name}-ep", "gpus": [0, 1], "tp": 1, "peak_rps": 6.0, "tz_offset_h": -8,
                        "prompt_median": 4000}]}
        for name, limit in (("h100-700w", 700), ("h100-400w", 400))]}]}]}
    path = tmp_path / "caps.yaml"
    path.write_text(yaml.safe_dump(fleet))
    for shape in ("simple", "collector"):
        d = tmp_path / shape
        simulate(d, start=DAY, fleet=path, hours=0.05, shape=shape)
        rows = dict(duckdb.connect().execute(
            f"""SELECT host, max(power_avg_w) / max(power_limit_w) FROM read_parquet('{d}/power/**/*.parquet')
                WHERE power_avg_w IS NOT NULL GROUP BY ALL""").fetchall())
        assert rows["h100-400w"] <= 1.04 and rows["h100-700w"] <= 1.04, (shape, rows)


def test_pipeline_stages_run_offset_by_the_1f1b_schedule():
    """Four hosts as two pipelines of two stages: stage 1 starts one forward slot after stage 0 and stops
    one backward slot before it; data-parallel copies of a stage run together; pp = 1 stays lock-step."""
    from collectors.simulate import phases
    from collectors.simulate.training import run_job

    hosts = run_job(np.random.default_rng(5), [8, 8, 8, 8], 120.0, host_jitter_sd=0.0, pp=2, microbatches=4)
    steps = [h.start_s[h.kind == phases.STEP][:20] for h in hosts]
    ends = [h.end_s[h.kind == phases.STEP][:20] for h in hosts]
    slot = (ends[0] - steps[0]) / 5  # stage 0 computes the whole step: (4 + 2 − 1) slots
    np.testing.assert_allclose(steps[1] - steps[0], slot / 3, rtol=1e-9)
    np.testing.assert_allclose(ends[0] - ends[1], 2 * slot / 3, rtol=1e-9)
    np.testing.assert_allclose(steps[2], steps[0])
    np.testing.assert_allclose(steps[3], steps[1])
    lock = run_job(np.random.default_rng(5), [8, 8], 120.0, host_jitter_sd=0.0)
    np.testing.assert_allclose(lock[0].start_s[lock[0].kind == phases.STEP], lock[1].start_s[lock[1].kind == phases.STEP])
