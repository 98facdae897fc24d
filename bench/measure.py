"""Wall time, CPU time and peak RSS of a child process tree, measured the same way for every contender."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results"


@dataclass
class Measurement:
    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int
    stdout: str = ""
    killed_over_mb: float | None = None
    """Set when the tree outgrew ``rss_cap_mb`` and was killed (it would have thrashed or met the OOM killer)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.killed_over_mb is None


def run_measured(name: str, argv: list[str], env: dict | None = None, poll_s: float = 0.05,
                 rss_cap_mb: float | None = None) -> Measurement:
    """Run ``argv``; CPU from the kernel's accounting of reaped children, RSS by polling the tree.

    With ``rss_cap_mb``, a tree whose RSS passes the cap is killed and the result says so.
    """
    before = os.times()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    killed = None
    stop = threading.Event()

    def poll():
        nonlocal peak, killed
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
                if rss_cap_mb and peak > rss_cap_mb * 2**20 and killed is None:
                    killed = peak / 2**20
                    for p in reversed(procs):
                        p.kill()
            except psutil.Error:
                pass
            time.sleep(poll_s)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    stop.set()
    watcher.join()
    wall = time.perf_counter() - started
    after = os.times()
    if proc.returncode:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return Measurement(name, wall, cpu, peak / 2**20, proc.returncode, out.decode(errors="replace"), killed)


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_at_start": os.getloadavg(),
    }


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str))
    return path
