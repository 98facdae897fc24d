"""A four-cluster fleet for the scale-out tests: a training cluster, two inference clusters and
one that mixes both roles (so a role is the sum of parts of several clusters)."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import yaml

from collectors.simulate import simulate

DAY = dt.date(2026, 11, 30)
HOURS = 0.1


def _gpus(n: int) -> list[dict]:
    return [{"index": i, "tdp_w": 700, "model": "H200"} for i in range(n)]


def _training(name: str, job: str) -> dict:
    return {"name": name, "role": "training", "gpus": _gpus(2), "jobs": [{"name": job, "gpus": [0, 1]}]}


def _inference(name: str, endpoint: str, tz: float) -> dict:
    return {"name": name, "role": "inference", "gpus": _gpus(2),
            "endpoints": [{"name": endpoint, "gpus": [0, 1], "tz_offset_h": tz, "peak_rps": 2.5}]}


FLEET = {
    "fleets": [
        {
            "name": "four",
            "clusters": [
                {"name": "c-train", "hosts": [_training("tr-0", "job-a"), _training("tr-1", "job-a")]},
                {"name": "c-infer-0", "hosts": [_inference("in-0", "chat-0", -8)]},
                {"name": "c-infer-1", "hosts": [_inference("in-1", "chat-1", 1), _inference("in-2", "code-1", 9)]},
                {"name": "c-mixed", "hosts": [_training("tr-2", "job-b"), _inference("in-3", "chat-2", -5)]},
            ],
        }
    ]
}


def simulate_four_clusters(data_dir: Path) -> Path:
    fleet_file = data_dir.parent / f"{data_dir.name}-fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(FLEET))
    simulate(data_dir, start=DAY, fleet=fleet_file, hours=HOURS, seed=3)
    return data_dir


def copy_raw(src: Path, dst: Path) -> Path:
    """The raw datasets and inventory of ``src`` in a fresh data dir (no derived tables, no runs)."""
    dst.mkdir(parents=True)
    for name in ("power", "requests", "job_events", "inventory.yaml"):
        path = src / name
        if path.is_dir():
            shutil.copytree(path, dst / name)
        elif path.exists():
            shutil.copy2(path, dst / name)
    return dst
