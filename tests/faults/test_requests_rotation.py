"""Item 4, tail mode: a log written continuously while it is rotated (rename, copytruncate) and the
follower is SIGKILLed and restarted; every request must be stored exactly once.

Single rotations, truncations and a crash between Parquet and checkpoint are tested one at a time in
``tests/test_requests_tail.py``; here they happen under a live writer, at instants nobody chose.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from collectors.requests.tail import Follower
from tests.test_requests_tail import assert_exactly, line, stored_ids

N = 3000


class RotatingWriter(threading.Thread):
    """Appends request lines like a gateway (a few lines per write, often a partial line), and rotates
    every ~400 lines: by rename (the writer keeps its old handle a moment) or by copytruncate."""

    def __init__(self, logs: Path, n: int = N, seed: int = 5, pause_s: float = 0.0005):
        super().__init__(daemon=True)
        self.logs, self.n, self.rng, self.pause_s = logs, n, random.Random(seed), pause_s
        self.rotations: list[str] = []

    def run(self) -> None:
        log = self.logs / "app.jsonl"
        fh = open(log, "ab", buffering=0)
        i, k = 0, 0
        carry = b""
        while i < self.n:
            batch = min(self.rng.randint(1, 8), self.n - i)
            data = carry + "".join(line(j) for j in range(i, i + batch)).encode()
            i += batch
            cut = len(data) - self.rng.randint(0, 30) if i < self.n else len(data)  # leave a partial line
            fh.write(data[:cut])
            carry = data[cut:]
            time.sleep(self.pause_s)
            if i // 400 > k and i < self.n:
                k = i // 400
                if k % 2:  # rename: late bytes still go to the old file, then the writer reopens
                    os.rename(log, self.logs / f"app.jsonl.{k}")
                    fh.write(carry)
                    carry = b""
                    fh.close()
                    fh = open(log, "ab", buffering=0)
                    self.rotations.append("rename")
                else:  # copytruncate: copy, then cut the live file to zero (the writer keeps its handle)
                    fh.write(carry)
                    carry = b""
                    shutil.copyfile(log, self.logs / f"app.jsonl.{k}")
                    os.truncate(log, 0)
                    self.rotations.append("copytruncate")
        fh.close()


def test_rotation_and_truncation_under_a_live_writer(tmp_path):
    logs, data = tmp_path / "logs", tmp_path / "data"
    logs.mkdir()
    writer = RotatingWriter(logs)
    f = Follower([logs], Ingestor(data, "jsonl", progress=False), flush_interval_s=0.05, poll_interval_s=0.01,
                 close_after_s=0.3)
    stop = threading.Event()
    follower = threading.Thread(target=f.run, args=(stop,), daemon=True)
    follower.start()
    writer.start()
    writer.join(60)
    deadline = time.monotonic() + 30
    while len(stored_ids(data)) < N and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    follower.join(30)
    assert set(writer.rotations) == {"rename", "copytruncate"}
    assert_exactly(data, range(N))  # none lost, none twice
    assert read_quarantine(data).num_rows == 0  # no partial line was ever taken for a bad one
    assert f.ingestor.summary.ingested == N


@pytest.mark.slow  # a real `wattline ingest --follow` killed at many instants (~20 s)
def test_follow_cli_sigkilled_at_random_instants_then_restarted(tmp_path):
    logs, data = tmp_path / "logs", tmp_path / "data"
    logs.mkdir()
    writer = RotatingWriter(logs, n=N, pause_s=0.03)  # ~20 s of writing: kills land mid-stream even on a loaded machine
    exe = Path(sys.executable).with_name("wattline")
    cmd = [str(exe), "ingest", "requests", "--follow", "--allow-unknown-endpoint", str(logs), "--flush-interval-s", "0.2", "--data-dir", str(data)]
    rng = random.Random(7)
    writer.start()
    kills, seen = 0, []
    while writer.is_alive() or kills < 4:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "following" in p.stderr.readline()  # started (~1 s): the kill lands in reads, flushes, checkpoints
        time.sleep(rng.uniform(0.3, 1.5))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        kills += 1
        got = stored_ids(data)
        assert len(got) == len(set(got)), "a request was written twice"
        seen.append(len(got))
    # the last restart runs to the end and stops cleanly
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "following" in p.stderr.readline()  # its signal handlers are installed
        deadline = time.monotonic() + 30
        while len(stored_ids(data)) < N and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert_exactly(data, range(N))
    assert read_quarantine(data).num_rows == 0
    assert len(set(seen)) > 2, seen  # the kills landed while requests were flowing
    print(f"\nfollow CLI: {kills} SIGKILLs, stored at each kill {seen}, rotations {writer.rotations}")
