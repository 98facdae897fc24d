"""Inventories of N GPUs (8 per host; a third of the hosts train one job, the rest serve two endpoints each)."""

from __future__ import annotations

from pathlib import Path

import yaml


def fleet_of(n_gpus: int) -> dict:
    if n_gpus % 8:
        raise ValueError("n_gpus must be a multiple of 8")
    hosts = n_gpus // 8
    training = hosts // 3
    gpus = [{"index": i, "tdp_w": 700, "model": "H200"} for i in range(8)]
    rows = []
    for h in range(hosts):
        if h < training:
            rows.append({"name": f"train-{h}", "role": "training", "provisioned_w": 6500, "gpus": gpus,
                         "jobs": [{"name": "pretrain", "gpus": list(range(8))}]})
        else:
            rows.append({"name": f"infer-{h}", "role": "inference", "provisioned_w": 6500, "gpus": gpus,
                         "endpoints": [{"name": f"ep-{h}-a", "gpus": [0, 1, 2, 3], "tz_offset_h": (h % 5) - 2},
                                       {"name": f"ep-{h}-b", "gpus": [4, 5, 6, 7], "tz_offset_h": (h % 7) - 3}]})
    clusters = [{"name": f"c{i // 8}", "hosts": rows[i:i + 8]} for i in range(0, len(rows), 8)]
    return {"fleets": [{"name": "bench", "clusters": clusters}]}


def write_fleet(n_gpus: int, path: Path) -> Path:
    path.write_text(yaml.safe_dump(fleet_of(n_gpus), sort_keys=False))
    return path
