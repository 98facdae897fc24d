"""Built-in fleets (``demo``, ``tiny``) as inventories, and resolving the ``fleet`` argument.

Endpoints may carry optional simulator keys (the inventory allows extra keys):
``peak_rps`` (arrival rate at the local-time peak), ``prompt_median`` and ``output_median``
(token medians). Hosts' GPUs have no other simulator-specific settings.
"""

from __future__ import annotations

from pathlib import Path

from collectors.inventory import Inventory, InventoryError, load_inventory, parse_inventory

H200_TDP_W = 700.0
HOST_PROVISIONED_W = 6500.0
"""8 × 700 W GPUs plus ~900 W of CPUs, fans, NICs and drives."""


def _gpus(n: int) -> list[dict]:
    return [{"index": i, "tdp_w": H200_TDP_W, "model": "H200"} for i in range(n)]


def _endpoint(name: str, gpus: list[int], tz_offset_h: float, **extra) -> dict:
    return {"name": name, "gpus": gpus, "tz_offset_h": tz_offset_h, **extra}


def _inference_host(name: str, a: dict, b: dict) -> dict:
    return {
        "name": name,
        "role": "inference",
        "provisioned_w": HOST_PROVISIONED_W,
        "gpus": _gpus(8),
        "endpoints": [a, b],
    }


def _demo() -> dict:
    chat = {"peak_rps": 2.2, "prompt_median": 1000, "output_median": 170}
    code = {"peak_rps": 2.6, "prompt_median": 1500, "output_median": 130}
    lo, hi = [0, 1, 2, 3], [4, 5, 6, 7]
    training = [
        {
            "name": f"train-{i}",
            "role": "training",
            "provisioned_w": HOST_PROVISIONED_W,
            "gpus": _gpus(8),
            "jobs": [{"name": "pretrain-a", "gpus": list(range(8))}],
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
                            _inference_host("infer-2", _endpoint("chat-eu-0", lo, 1, **chat), _endpoint("chat-eu-1", hi, 2, **chat)),
                            _inference_host("infer-3", _endpoint("chat-ap-0", lo, 9, **chat), _endpoint("code-ap-0", hi, 8, **code)),
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
                                "jobs": [{"name": "tiny-train", "gpus": [0, 1]}],
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


BUILTIN = {"demo": _demo, "tiny": _tiny}


def resolve_fleet(fleet: str | Path) -> Inventory:
    """A built-in fleet by name, or the inventory YAML at ``fleet``."""
    if isinstance(fleet, str) and fleet in BUILTIN:
        return parse_inventory(BUILTIN[fleet](), f"built-in fleet {fleet!r}")
    path = Path(fleet)
    if not path.is_file():
        names = ", ".join(sorted(BUILTIN))
        raise InventoryError(f"fleet {str(fleet)!r}: neither a built-in fleet ({names}) nor an inventory file")
    return load_inventory(path)
