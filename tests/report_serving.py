"""Rows for the serving section's tables: `power_cap_whatif` with its documented columns, and
`energy_per_token` with the latency and model columns the frontier chart reads."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

CAP_SCHEMA = pa.schema([
    ("date", pa.date32()), ("level", pa.string()), ("entity", pa.string()), ("phase", pa.string()), ("cap_factor", pa.float64()),
    ("cap_w", pa.float32()), ("enforced_limit_w", pa.float32()), ("gpu_model", pa.string()), ("gpus", pa.int32()),
    ("gpu_seconds", pa.float64()), ("energy_j", pa.float64()), ("time_above_share", pa.float64()), ("energy_above_share", pa.float64()),
    ("energy_above_cap_j", pa.float64()), ("alpha", pa.float64()), ("alpha_low", pa.float64()), ("alpha_high", pa.float64()),
    ("alpha_source", pa.string()), ("est_energy_j", pa.float64()), ("est_energy_low_j", pa.float64()), ("est_energy_high_j", pa.float64()),
    ("est_gpu_seconds", pa.float64()), ("est_gpu_seconds_low", pa.float64()), ("est_gpu_seconds_high", pa.float64()),
    ("est_energy_change_pct", pa.float64()), ("est_duration_change_pct", pa.float64()), ("provisioned_w", pa.float64()),
    ("p99_2s_w", pa.float32()), ("max_2s_w", pa.float32()), ("extra_hosts_at_cap", pa.int32()),
])

FACTORS = (1.0, 0.9, 0.8, 0.7, 0.6)


def cap_rows(date: str, entities: list[tuple[str, str]], clusters: list[str]) -> list[dict]:
    """Per (level, entity) and cap: 10 % of 1,000 GPU-s above the 700 W limit at 1.0, more below it;
    the estimate of a 650 W demand second under the α model with α = 0.2 (0.1–0.5)."""
    d = dt.date.fromisoformat(date)
    out = []
    for level, entity in [*entities, *(("cluster", c) for c in clusters)]:
        for f in FACTORS:
            cap = 700 * f
            above = min(1.0, 0.1 + (1 - f) * 2)
            stretch = {a: (max(650 / cap, 1)) ** a if f < 1 else 1.0 for a in (0.2, 0.1, 0.5)}
            energy = 1000 * 400.0
            est = {a: energy * (1 - above) + 1000 * above * cap * s if f < 1 else energy for a, s in stretch.items()}  # 1.0: observed
            for phase in ("all", "prefill") if level != "cluster" else ("all",):
                out.append(dict(
                    date=d, level=level, entity=entity, phase=phase, cap_factor=f, cap_w=cap, enforced_limit_w=700.0, gpu_model="H200",
                    gpus=2, gpu_seconds=1000.0, energy_j=energy, time_above_share=above, energy_above_share=min(1.0, above * 1.5),
                    energy_above_cap_j=1000 * above * max(650 - cap, 0), alpha=0.2, alpha_low=0.1, alpha_high=0.5,
                    alpha_source="uncalibrated: test", est_energy_j=est[0.2], est_energy_low_j=est[0.1], est_energy_high_j=est[0.5],
                    est_gpu_seconds=1000 * (1 - above) + 1000 * above * stretch[0.2], est_gpu_seconds_low=1000 * (1 - above) + 1000 * above * stretch[0.1],
                    est_gpu_seconds_high=1000 * (1 - above) + 1000 * above * stretch[0.5], est_energy_change_pct=100 * (est[0.2] / energy - 1),
                    est_duration_change_pct=None, provisioned_w=4000.0 if level == "cluster" else None,
                    p99_2s_w=2000 * f if level == "cluster" else None, max_2s_w=2400 * f if level == "cluster" else None,
                    extra_hosts_at_cap=int((4000 - 2400 * f) // (1400 * f)) if level == "cluster" else None,
                ))
    return out


EPT_SERVING_SCHEMA = pa.schema([
    ("date", pa.date32()), ("endpoint", pa.string()), ("bucket_kind", pa.string()), ("bucket", pa.string()),
    ("j_per_prompt_token", pa.float64()), ("j_per_output_token", pa.float64()), ("j_per_request", pa.float64()),
    ("prefill_mean_w", pa.float64()), ("decode_mean_w", pa.float64()), ("prefill_time_share", pa.float64()),
    ("prefill_energy_share", pa.float64()), ("tdp_exceedances", pa.float64()), ("prompt_tokens", pa.float64()), ("output_tokens", pa.float64()),
    ("model", pa.string()), ("params_b", pa.float64()), ("precision", pa.string()), ("tp", pa.int32()), ("pp", pa.int32()),
    ("gpus_per_replica", pa.int32()), ("gpu_model", pa.string()),
    *((f"{m}_{q}_ms", pa.float64()) for m in ("ttft", "tpot", "e2e", "queue") for q in ("p50", "p90", "p99")),
    ("output_tokens_per_s_per_gpu", pa.float64()),
])

BATCHES = (("1", 1), ("2-3", 2), ("4-7", 5), ("8-15", 10), ("16+", 20))


def ept_serving_rows(date: str, endpoints: dict[str, tuple[str, int, str]]) -> list[dict]:
    """endpoints: name → (model, GPUs per replica, GPU model). Larger batches: fewer J per output
    token, slower tokens: J = 5 / batch^0.5, TPOT = 20 + 2 × batch ms, TTFT = 100 + 15 × batch ms."""
    d = dt.date.fromisoformat(date)
    out = []
    for k, (ep, (model, gpr, gpu_model)) in enumerate(endpoints.items()):
        for kind, bucket, batch in (("all", "all", 6), *(("batch_size", b, n) for b, n in BATCHES)):
            lat = {"ttft": 100 + 15 * batch + 10 * k, "tpot": 20 + 2 * batch + k, "e2e": 2000 + 50 * batch, "queue": 5 * batch}
            out.append(dict(
                date=d, endpoint=ep, bucket_kind=kind, bucket=bucket, j_per_prompt_token=0.3 / batch ** 0.5,
                j_per_output_token=5 / batch ** 0.5 * (1 + 0.1 * k), j_per_request=300.0, prefill_mean_w=650.0, decode_mean_w=300.0,
                prefill_time_share=0.1, prefill_energy_share=0.2, tdp_exceedances=1.0, prompt_tokens=1000.0 * (k + 1),
                output_tokens=200.0 * (k + 1), model=model, params_b=8.0, precision="bf16", tp=gpr, pp=1, gpus_per_replica=gpr,
                gpu_model=gpu_model, output_tokens_per_s_per_gpu=50.0 * batch / gpr,
                **{f"{m}_{q}_ms": v * f for m, v in lat.items() for q, f in (("p50", 1.0), ("p90", 1.5), ("p99", 2.0))},
            ))
    return out
