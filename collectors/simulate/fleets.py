"""Built-in fleets (``demo``, ``tiny``, ``paper``) as inventories, and resolving the ``fleet`` argument.

Endpoints may carry optional simulator keys (known keys of the inventory, collectors/inventory.py):
``peak_rps`` (arrival rate at the local-time peak), ``prompt_median`` and ``output_median``
(token medians), ``traffic`` (``conv`` or ``code``: whose Azure 2023 length distributions and
burstiness the endpoint follows, :mod:`collectors.simulate.traffic`). Hosts' GPUs have no other simulator-specific settings.

The built-in fleets also say what the simulator models: each endpoint one tensor-parallel group
(``tp`` = its GPUs) of the 8B decoder its engine is calibrated on, each job pure data parallel
(``dp`` = its GPUs). The simulator does not read these keys: they describe, they do not drive.
"""

from __future__ import annotations

from pathlib import Path

from collectors.inventory import Inventory, InventoryError, load_inventory, parse_inventory

H200_TDP_W = 700.0
HOST_PROVISIONED_W = 6500.0
"""8 × 700 W GPUs plus ~900 W of CPUs, fans, NICs and drives."""


DEMO_ARRIVAL_PEAK_TROUGH = 3.05
"""The demo's inference role: its summed arrival rate (hourly means of the endpoints' diurnal curves) peaks
at 21:00 UTC at 3.05 × its 09:00 UTC trough. An assumption of this project (each endpoint's own
peak/trough is ``1 / arrivals.TROUGH_SHARE`` = 8.3, not a cited figure), stated in docs/simulator.md; the
realised hourly request counts of the demo day (seed 0, with the minute-scale bursts) give 3.11."""


def _gpus(n: int) -> list[dict]:
    return [{"index": i, "tdp_w": H200_TDP_W, "model": "H200"} for i in range(n)]


SIMULATED_MODEL = {"model": "sim-8b-decoder", "params_b": 8.0}
"""The model the serving engine is calibrated on (collectors/simulate/calibration.py: an 8B decoder on one H200)."""


DEMO_CHAT_MODEL = {"model": "sim-70b-decoder", "params_b": 70.0}
"""The demo's chat endpoints serve a 70B on 4 H200s (tp 4): a 1,000-token prefill computes ~56 ms after
the engine's ~60 ms of host-side work, long enough for the board to show it."""
DEMO_CODE_MODEL = {"model": "sim-34b-decoder", "params_b": 34.0}
"""The demo's code endpoints serve a 34B on 4 H200s (tp 4): a 1,500-token prefill computes ~43 ms, a little
longer than the calibrated 8B's on one H200 (32 ms, capture 4). The 8B on tp 4 would compute ~12 ms after
the engine's ~60 ms of host-side work, too short for a sampler to show: its prefill segments peaked below decode's."""


def _endpoint(name: str, gpus: list[int], tz_offset_h: float, **extra) -> dict:
    return {"name": name, "gpus": gpus, "tz_offset_h": tz_offset_h, **SIMULATED_MODEL, "tp": len(gpus), "pp": 1, **extra}


def _job(name: str, gpus: list[int], job_gpus: int, tp: int = 1, pp: int = 1) -> dict:
    """A synchronous job (collectors/simulate/training.py) of ``job_gpus`` GPUs on all its hosts:
    tp within a host, pp stages across hosts in inventory order, the rest data parallel."""
    return {"name": name, "gpus": gpus, "tp": tp, "pp": pp, "dp": job_gpus // (tp * pp)}


def _inference_host(name: str, a: dict, b: dict) -> dict:
    return {
        "name": name,
        "role": "inference",
        "provisioned_w": HOST_PROVISIONED_W,
        "gpus": _gpus(8),
        "endpoints": [a, b],
    }


def _demo() -> dict:
    """Most endpoints serve one region (six in UTC−5…−8, two in UTC+1), so the inference role's sum
    follows a day: its hourly arrival rate peaks/troughs at DEMO_ARRIVAL_PEAK_TROUGH (docs/simulator.md)."""
    chat = {"peak_rps": 2.2, "prompt_median": 1000, "output_median": 170, **DEMO_CHAT_MODEL}
    code = {"peak_rps": 2.6, "prompt_median": 1500, "output_median": 130, "traffic": "code", **DEMO_CODE_MODEL}
    lo, hi = [0, 1, 2, 3], [4, 5, 6, 7]
    training = [
        {
            "name": f"train-{i}",
            "role": "training",
            "provisioned_w": HOST_PROVISIONED_W,
            "gpus": _gpus(8),
            "jobs": [_job("pretrain-a", list(range(8)), 16)],
        }
        for i in range(2)
    ]
    return {
        "fleets": [
            {
                "name": "demo",
                "clusters": [
                    {"name": "train-c0", "provisioned_w": 12500.0, "hosts": training},
                    {
                        "name": "infer-c0",
                        "provisioned_w": 12500.0,
                        "hosts": [
                            _inference_host("infer-0", _endpoint("chat-us-0", lo, -8, **chat), _endpoint("code-us-0", hi, -5, **code)),
                            _inference_host("infer-1", _endpoint("chat-us-1", lo, -6, **chat), _endpoint("code-eu-0", hi, 1, **code)),
                        ],
                    },
                    {
                        "name": "infer-c1",
                        "provisioned_w": 12500.0,
                        "hosts": [
                            _inference_host("infer-2", _endpoint("chat-eu-0", lo, 1, **chat), _endpoint("chat-us-2", hi, -7, **chat)),
                            _inference_host("infer-3", _endpoint("chat-us-3", lo, -5, **chat), _endpoint("code-us-1", hi, -8, **code)),
                        ],
                    },
                ],
            }
        ]
    }


def _tiny() -> dict:
    return {
        "fleets": [
            {
                "name": "tiny",
                "clusters": [
                    {
                        "name": "c0",
                        "provisioned_w": 6000.0,
                        "hosts": [
                            {
                                "name": "train-0",
                                "role": "training",
                                "provisioned_w": 2500.0,
                                "gpus": _gpus(2),
                                "jobs": [_job("tiny-train", [0, 1], 2)],
                            },
                            {
                                "name": "infer-0",
                                "role": "inference",
                                "provisioned_w": 3500.0,
                                "gpus": _gpus(4),
                                "endpoints": [
                                    # UTC-8: midnight UTC is 16:00 local, so a short run at 00:00 UTC sees peak load.
                                    _endpoint("chat-a", [0, 1], -8, peak_rps=2.5),
                                    _endpoint("chat-b", [2, 3], 9, peak_rps=2.0),
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }


PAPER_TZ_H = (-8, -7, -6, -5)
PAPER_PP = 16
"""The paper job's pipeline stages (tp 8 within a host, 16 stages over 16 hosts, dp 8 at 128 hosts):
a 3D-parallel layout of the size the published cluster trains (docs/simulator.md, "Paper scale")."""
PAPER_JOB_MODEL = {"model": "gpt3-175b", "params_b": 175.0, "precision": "bf16", "engine": "megatron"}
"""A GPT-3-sized dense model: with 16 micro-batches of one 4,096-token sequence per data-parallel replica
(0.5 M tokens a step) at 40 % of the H200's bf16 peak on 1,024 GPUs, a step takes ~1.4 s, the
simulator's 1.45 s median step (training.STEP_S_MEDIAN)."""
PAPER_PEAK_RPS = 4.0
"""Per 8-GPU endpoint at its local peak: with the calibrated engine (capture 4) busy but not saturated."""


def paper_fleet(inference_hosts: int = 256, training_hosts: int = 128) -> dict:
    """A fleet at the scale of the published cluster measurements: an inference cluster of
    ``inference_hosts`` × 8 GPUs, one 8-GPU endpoint per host (tensor parallel 8), all in one region
    (UTC−5…−8), and a training cluster of ``training_hosts`` × 8 GPUs running one 3D-parallel job
    (tp 8, pp ``PAPER_PP`` or the largest divisor of the hosts below it, dp the rest).
    The default is 2,048 inference and 1,024 training GPUs; ``bench/paper_swings.py`` scales it down."""

    def host(name: str, role: str, **work) -> dict:
        return {"name": name, "role": role, "provisioned_w": HOST_PROVISIONED_W, "gpus": _gpus(8), **work}

    inference = [
        host(f"inf-{i:04d}", "inference",
             endpoints=[_endpoint(f"ep-{i:04d}", list(range(8)), PAPER_TZ_H[i % len(PAPER_TZ_H)], peak_rps=PAPER_PEAK_RPS)])
        for i in range(inference_hosts)
    ]
    pp = max(d for d in range(1, PAPER_PP + 1) if training_hosts % d == 0) if training_hosts else 1
    training = [host(f"trn-{i:04d}", "training", jobs=[_job("pretrain-paper", list(range(8)), 8 * training_hosts, tp=8, pp=pp) | PAPER_JOB_MODEL])
                for i in range(training_hosts)]
    return {
        "fleets": [
            {
                "name": "paper",
                "clusters": [
                    {"name": "infer-paper", "provisioned_w": HOST_PROVISIONED_W * inference_hosts, "hosts": inference},
                    {"name": "train-paper", "provisioned_w": HOST_PROVISIONED_W * training_hosts, "hosts": training},
                ][: 2 if training_hosts else 1],
            }
        ]
    }


def _serving() -> dict:
    """Two model sizes on two GPU models with different tp, and one model under two power limits:
    a 70B on H100s (tp 4, two replicas), an 8B on H200s (tp 1, eight replicas), the same 8B on
    A100s at their 400 W TDP and capped at 250 W (docs/simulator.md, "The serving fleet")."""
    def gpus(model: str, tdp: float) -> list[dict]:
        return [{"index": i, "tdp_w": tdp, "model": model} for i in range(8)]

    llama70 = {"model": "meta-llama/Llama-3.1-70B-Instruct", "params_b": 70.0, "precision": "bf16", "tp": 4, "pp": 1}
    llama8 = {"model": "meta-llama/Llama-3.1-8B-Instruct", "params_b": 8.0, "precision": "bf16", "tp": 1, "pp": 1}
    hosts = [
        {"name": "h100-0", "role": "inference", "provisioned_w": HOST_PROVISIONED_W, "gpus": gpus("NVIDIA H100 80GB HBM3", 700.0),
         "endpoints": [{"name": "chat-70b", "gpus": list(range(8)), "tz_offset_h": -8, "peak_rps": 3.0, **llama70}]},
        {"name": "h200-0", "role": "inference", "provisioned_w": HOST_PROVISIONED_W, "gpus": gpus("NVIDIA H200", 700.0),
         "endpoints": [{"name": "chat-8b", "gpus": list(range(8)), "tz_offset_h": -6, "peak_rps": 12.0, **llama8}]},
        {"name": "a100-0", "role": "inference", "provisioned_w": 4100.0, "gpus": gpus("NVIDIA A100-SXM4-80GB", 400.0),
         "endpoints": [{"name": "code-8b-400w", "gpus": list(range(8)), "tz_offset_h": -5, "peak_rps": 8.0, "traffic": "code",
                        "prompt_median": 1500, "output_median": 130, **llama8}]},
        {"name": "a100-1", "role": "inference", "provisioned_w": 4100.0, "power_limit_w": 250.0,
         "gpus": gpus("NVIDIA A100-SXM4-80GB", 400.0),
         "endpoints": [{"name": "code-8b-250w", "gpus": list(range(8)), "tz_offset_h": -5, "peak_rps": 8.0, "traffic": "code",
                        "prompt_median": 1500, "output_median": 130, **llama8}]},
    ]
    return {"fleets": [{"name": "serving", "clusters": [{"name": "serve-c0", "provisioned_w": 20000.0, "hosts": hosts}]}]}


BUILTIN = {"demo": _demo, "tiny": _tiny, "paper": paper_fleet, "serving": _serving}


def resolve_fleet(fleet: str | Path) -> Inventory:
    """A built-in fleet by name, or the inventory YAML at ``fleet``."""
    if isinstance(fleet, str) and fleet in BUILTIN:
        return parse_inventory(BUILTIN[fleet](), f"built-in fleet {fleet!r}")
    path = Path(fleet)
    if not path.is_file():
        names = ", ".join(sorted(BUILTIN))
        raise InventoryError(f"fleet {str(fleet)!r}: neither a built-in fleet ({names}) nor an inventory file")
    return load_inventory(path)
