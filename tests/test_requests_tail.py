"""`--follow`: rotation, truncation, new files, partial lines and restarts, with no loss and no repeat."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from collectors.requests import checkpoint as checkpoint_mod
from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from collectors.requests.tail import Follower

T0_S = 1_796_216_700


def line(i: int) -> str:
    return json.dumps({
        "request_id": f"r{i}", "endpoint": "chat", "arrival_ts": T0_S + i, "end_ts": T0_S + i + 1,
        "prompt_tokens": i, "output_tokens": 3,
    }) + "\n"


def write(path: Path, ids, mode="a") -> None:
    with open(path, mode) as fh:
        fh.write("".join(line(i) for i in ids))


def stored_ids(data: Path) -> list[str]:
    files = sorted((data / "requests").glob("date=*/*.parquet"))
    if not files:
        return []
    return pads.dataset(files, format="parquet").to_table(columns=["request_id"]).column("request_id").to_pylist()


def assert_exactly(data: Path, ids) -> None:
    got = stored_ids(data)
    assert len(got) == len(set(got)), "a request was written twice"
    assert sorted(got, key=lambda s: int(s[1:])) == [f"r{i}" for i in ids]


@pytest.fixture
def dirs(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    return logs, tmp_path / "data"


def follower(targets, data, **kw) -> Follower:
    kw.setdefault("close_after_s", 0.0)
    return Follower(targets, Ingestor(data, "jsonl", progress=False), **kw)


def cycle(f: Follower, n: int = 1) -> None:
    for _ in range(n):
        f.poll()
        f.flush()


def test_partial_last_line_waits_for_its_newline(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(3))
    with open(log, "a") as fh:
        fh.write(line(3)[:25])
    f = follower([log], data)
    cycle(f)
    assert_exactly(data, range(3))
    assert f.files[next(iter(f.files))].pos.offset == len("".join(line(i) for i in range(3)))
    with open(log, "a") as fh:
        fh.write(line(3)[25:])
    cycle(f)
    assert_exactly(data, range(4))
    assert f.ingestor.summary.quarantined == 0


def test_rotation_by_rename_reads_the_old_file_to_its_end(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(5))
    f = follower([log], data)  # the file by name, as tail -F
    cycle(f)
    writer = open(log, "a")  # the server still holds the old file open
    os.rename(log, logs / "app.jsonl.1")
    writer.write(line(5) + line(6))  # late lines into the rotated file
    writer.close()
    write(log, range(7, 10), mode="w")  # the new file under the name
    cycle(f, 2)
    assert_exactly(data, range(10))
    assert len(f.files) == 1  # the rotated file was drained and closed
    write(log, range(10, 12))
    cycle(f)
    assert_exactly(data, range(12))


def test_rotated_file_left_with_a_truncated_last_line(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(2))
    with open(log, "a") as fh:
        fh.write(line(2)[:30])  # the writer died mid-line
    f = follower([log], data)
    cycle(f)
    os.rename(log, logs / "old.log")
    write(log, [3], mode="w")
    cycle(f, 2)
    assert_exactly(data, [0, 1, 3])
    (q,) = read_quarantine(data).to_pylist()
    assert q["reason"].startswith("truncated last line") and q["line_no"] == 3


def test_copytruncate_rotation(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(6))
    f = follower([log], data)
    cycle(f)
    write(log, [6])  # written after the last poll...
    shutil.copy(log, logs / "app.jsonl.1")  # ...copied away by logrotate, then the log truncated
    os.truncate(log, 0)
    write(log, [7, 8])
    cycle(f, 2)
    # r6 went to the copy, which this follower does not watch: that is copytruncate's own window.
    assert_exactly(data, [0, 1, 2, 3, 4, 5, 7, 8])
    # following the directory instead picks the copy up, and content dedup drops its repeats
    g = follower([logs], data, checkpoint_path=data / "dir.json")
    cycle(g)
    assert_exactly(data, range(9))
    assert g.ingestor.summary.duplicates == 8  # r0..r5 in the copy, r7, r8 in the log


def test_truncate_and_rewrite_to_the_same_length(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, [0])
    f = follower([log], data)
    cycle(f)
    write(log, [1], mode="w")  # same size as before, other content: caught by the head fingerprint
    cycle(f)
    assert_exactly(data, [0, 1])


def test_new_files_in_a_directory(dirs):
    logs, data = dirs
    f = follower([logs], data)
    cycle(f)
    write(logs / "a.jsonl", range(3))
    cycle(f)
    write(logs / "b.jsonl", range(3, 5))
    write(logs / "ignored.txt", range(100, 102))
    write(logs / "a.jsonl", [5])
    cycle(f)
    assert_exactly(data, range(6))


def test_restart_resumes_without_loss_or_repeat(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(4))
    f = follower([log], data)
    cycle(f)
    write(log, range(4, 7))
    f.poll()  # read but never flushed: the process dies here
    f.close()
    write(log, range(7, 9))
    g = follower([log], data)
    cycle(g)
    assert_exactly(data, range(9))
    assert g.ingestor.summary.duplicates == 0


def test_crash_between_parquet_and_checkpoint(dirs, monkeypatch):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(3))
    with open(log, "a") as fh:
        fh.write("not json\n")
    f = follower([log], data)
    cycle(f)
    write(log, range(3, 6))
    f.poll()

    def die(*a, **k):
        raise KeyboardInterrupt("killed before the checkpoint")

    monkeypatch.setattr(checkpoint_mod, "save", die)
    with pytest.raises(KeyboardInterrupt):
        f.flush()  # the Parquet for r3..r5 is durable, the checkpoint still says r0..r2
    monkeypatch.undo()
    f.close()
    assert_exactly(data, range(6))
    g = follower([log], data)
    cycle(g)
    assert_exactly(data, range(6))
    assert (g.ingestor.summary.ingested, g.ingestor.summary.duplicates) == (0, 3)
    assert read_quarantine(data).num_rows == 1  # the bad line was not quarantined twice


def test_restart_after_rotation_while_down(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(3))
    f = follower([log], data)
    cycle(f)
    f.close()
    write(log, range(3, 5))  # written, then rotated while the follower was down
    os.rename(log, logs / "app.jsonl.1")
    write(log, range(5, 7), mode="w")
    g = follower([log], data)
    cycle(g, 2)
    assert_exactly(data, range(7))


def test_long_line_while_following(dirs):
    logs, data = dirs
    log = logs / "app.jsonl"
    f = Follower([log], Ingestor(data, "jsonl", max_line_bytes=2048, progress=False), close_after_s=0)
    write(log, [0])
    with open(log, "a") as fh:
        fh.write('{"request_id": "' + "x" * 5000)  # still being written
    cycle(f)
    with open(log, "a") as fh:
        fh.write("y" * 5000 + '"}\n')
    write(log, [1])
    cycle(f)
    assert_exactly(data, [0, 1])
    (q,) = read_quarantine(data).to_pylist()
    assert q["reason"] == "line too long" and q["raw_bytes"] == 10_018 and len(q["raw"]) == 2048


def test_cli_follow_flushes_and_stops_cleanly_on_sigterm(dirs):
    logs, data = dirs
    write(logs / "app.jsonl", range(3))
    exe = Path(sys.executable).with_name("wattline")
    proc = subprocess.Popen(
        [str(exe), "ingest", "requests", "--follow", "--allow-unknown-endpoint", str(logs), "--flush-interval-s", "0.2", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while len(stored_ids(data)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        write(logs / "app.jsonl", range(3, 5))
        write(logs / "new.jsonl", [5])
        while len(stored_ids(data)) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "ingested 6 request(s), quarantined 0, duplicates 0" in out
    assert_exactly(data, range(6))


def test_failed_flush_keeps_lines_and_retries(dirs, monkeypatch):
    import threading

    from collectors.requests import store

    logs, data = dirs
    log = logs / "app.jsonl"
    write(log, range(3))
    real = store.write_dataset
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(store, "write_dataset", flaky)
    warnings = []
    f = Follower([log], Ingestor(data, "jsonl", progress=False), flush_interval_s=0.0, poll_interval_s=0.01,
                 close_after_s=0, warn=warnings.append)
    f.run(threading.Event(), max_s=0.3)
    assert any("No space left" in w for w in warnings)
    assert_exactly(data, range(3))
