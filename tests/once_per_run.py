"""Session fixtures built once per test run, also under pytest-xdist (tests/days.py's shared days,
tests/demo_day.py). Imports nothing heavy, so a worker that only waits pays nothing for it."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
seconds = [0.0]
"""Seconds this process spent in ``once_per_run`` (building, or waiting for another worker to
build): tests/conftest.py leaves them out of the setup time it holds against a test."""


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], T]) -> T:
    """``make(root)`` once for the whole test run: in a serial session into a fresh temp folder;
    under pytest-xdist once for all workers, by the first worker that asks, under a lock in the
    run's temp folder that the workers share (the parent of each worker's own), while the others
    wait and then read what it left (the result, pickled beside the day). So ``-n 2`` pays for
    each shared day once, as a serial run does."""
    start = time.perf_counter()
    try:
        return _once(tmp_path_factory, name, make)
    finally:
        seconds[0] += time.perf_counter() - start


def _once(tmp_path_factory, name: str, make: Callable[[Path], T]) -> T:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / "shared-days"
    shared.mkdir(exist_ok=True)
    made = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if make() raises
        if made.exists():
            return pickle.loads(made.read_bytes())
        root = shared / name
        if root.exists():  # a worker whose build failed left it half made
            shutil.rmtree(root)
        root.mkdir()
        result = make(root)
        made.write_bytes(pickle.dumps(result))
        return result
