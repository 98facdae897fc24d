"""Counters of everything that went wrong or was skipped, shared by the sampler threads and the flusher.

They are exposed three ways so an operator and the fault tests can see them: a JSON status file
rewritten atomically every flush, a log line every ``--status-seconds``, and the final summary.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path


class Counters:
    """Thread-safe named counters, global (``add``) or per GPU (``add_gpu``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._global: dict[str, float] = defaultdict(float)
        self._gpu: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._state: dict[int, str] = {}
        self.started_unix_s = time.time()

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._global[name] += amount

    def add_gpu(self, gpu: int, name: str, amount: float = 1) -> None:
        with self._lock:
            self._gpu[gpu][name] += amount

    def set_gpu_state(self, gpu: int, state: str) -> None:
        with self._lock:
            self._state[gpu] = state

    def get(self, name: str, gpu: int | None = None) -> float:
        with self._lock:
            return (self._global if gpu is None else self._gpu[gpu]).get(name, 0)

    def snapshot(self) -> dict:
        def clean(d):
            return {k: (int(v) if float(v).is_integer() else round(v, 6)) for k, v in sorted(d.items())}

        with self._lock:
            return {
                "updated_unix_s": round(time.time(), 3),
                "uptime_s": round(time.time() - self.started_unix_s, 3),
                "counters": clean(self._global),
                "gpus": {
                    str(g): {"state": self._state.get(g, "ok"), **clean(c)}
                    for g, c in sorted(self._gpu.items())
                },
            }


def status_json(snapshot: dict) -> str:
    return json.dumps(snapshot, indent=1, sort_keys=True)


def write_status(path: Path, snapshot: dict) -> bool:
    """Atomically replace the status file; False (never an exception) when the disk refuses."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(status_json(snapshot))
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False


def summary_line(snapshot: dict) -> str:
    """One log line: global counters then the non-zero per-GPU ones."""
    parts = [f"{k}={v}" for k, v in snapshot["counters"].items()]
    for g, c in snapshot["gpus"].items():
        extra = [f"{k}={v}" for k, v in c.items() if k != "state" and v]
        parts.append(f"gpu{g}[{c['state']}{': ' if extra else ''}{' '.join(extra)}]")
    return "status: " + " ".join(parts)
