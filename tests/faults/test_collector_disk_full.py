"""Item 3: the collector's disk fills up (a real 4 MiB tmpfs, filled by another file), then space returns.

What must survive: the process (no crash, sampling goes on), its memory (rows pending bounded by
``--max-pending-rows``), the data once space returns (written by itself), and the books: every sample
the fake NVML served is either on disk or counted as dropped (``rows_dropped``), exactly. Without
root (no ``mount``) the same checks run in-process with a writer patched to raise ENOSPC.
"""

from __future__ import annotations

import errno
import json
import re
import signal
import time

import pytest

from collectors.atomic import write_parquet_atomic
from collectors.nvml.counters import Counters
from collectors.nvml.daemon import Collector, CollectorConfig, status_path
from collectors.nvml.flusher import Flusher
from collectors.nvml.gpu_sampler import SamplingConfig
from tests.fakes import fake_pynvml as fake
from tests.faults.inject import fill_disk, hidden_power_files, power_keys, served_samples, tiny_tmpfs
from tests.nvml_helpers import FAKE, collector_process, power_files, read_power, wait_for_new_file

GPUS = 4  # 4 x (10 field + ~50 buffer rows/s) = ~240 rows/s
BOUND = 200  # --max-pending-rows: under a second of rows, so a 2.5 s outage must drop some
FLUSH_S = 0.3
ONE_FLUSH = GPUS * (119 + 2 * 10 * FLUSH_S)
"""The most rows one flush hands over: a driver-buffer drain (≤ 119 per GPU) and the field rows."""


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _last_counters(stderr: str) -> dict[str, int]:
    """The counters of the collector's final 'stopped; status: ...' log line."""
    line = [ln for ln in stderr.splitlines() if "stopped; status:" in ln][-1]
    return {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)\b", line.split("status:", 1)[1])}


def test_disk_full_on_a_real_filesystem_then_space_returns(tmp_path):
    with tiny_tmpfs(tmp_path / "mnt", "4m") as mnt:
        if mnt is None:
            pytest.skip("cannot mount a tmpfs here (not root); test_disk_full_patched_writer covers it")
        data = mnt / "data"
        log = tmp_path / "served.log"  # outside the full filesystem
        p = collector_process(data, {"gpus": GPUS, "served_log": str(log)}, "--flush-seconds", str(FLUSH_S),
                              "--max-pending-rows", str(BOUND), "--status-seconds", "0.2")
        try:
            wait_for_new_file(data, p)

            filler = fill_disk(mnt)
            rss = [_rss_kib(p.pid)]
            t_full = time.time()
            while time.time() - t_full < 2.5:  # full for 2.5 s: ~600 rows against a bound of 200
                assert p.poll() is None, p.communicate()  # no crash
                rss.append(_rss_kib(p.pid))
                time.sleep(0.1)
            before = power_files(data)
            filler.unlink()  # space returns: writing resumes by itself, no restart
            wait_for_new_file(data, p, before, timeout_s=5)
            time.sleep(0.8)

            # full again at stop: exit 1 and the rows it could not write are reported, not hidden
            filler = fill_disk(mnt)
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)
            assert p.returncode == 1, err
            assert re.search(r"exiting with \d+ rows that could not be written", err)
        finally:
            if p.poll() is None:  # a failed check above must not leave the collector running
                p.kill()
                p.communicate()
        final = _last_counters(err)
        filler.unlink()

        table = read_power(data)  # every visible file reads back, no partial file was left
        assert not hidden_power_files(data)
        on_disk = power_keys(table)
        assert len(on_disk) == len(set(on_disk))
        served = served_samples(log)
        lost = [k for k in served if k not in set(on_disk)]
        # the books balance: each served sample is on disk, dropped (bound) or pending at exit
        assert len(lost) == final["rows_dropped"] + final["rows_pending"], (len(lost), final)
        assert final["rows_dropped"] > 0 and final["write_errors"] >= 2
        # dropped while the disk was full: only samples served during an outage are missing
        t_free = max(served.values())
        assert all(t_full - FLUSH_S - 0.5 <= served[k] <= t_free for k in lost)
        # memory: the pending rows never passed the bound plus one flush's rows (with a buffer drain of ≤ 119 per GPU)
        pending = [int(v) for v in re.findall(r"rows_pending=(\d+)", err)]
        assert max(pending) <= BOUND + ONE_FLUSH, max(pending)
        assert max(rss) - rss[0] < 30 * 1024, rss  # KiB
        # loud: the first failure, the drops, the resumption
        assert "cannot write Parquet" in err and "No space left on device" in err
        assert "dropped the oldest" in err and "writing resumed after" in err
        # the status file (rewritten once space returned) says so too
        status = json.loads(status_path(data, "testhost").read_text())["counters"]
        assert status["write_errors"] >= 1 and status["rows_dropped"] >= 1
        print(f"\ndisk full: served {len(served)}, on disk {len(on_disk)}, dropped {final['rows_dropped']}, "
              f"pending at exit {final['rows_pending']}, write errors {final['write_errors']}, "
              f"max pending logged {max(pending)}, RSS growth {(max(rss) - rss[0]) / 1024:.1f} MiB")


def test_disk_full_patched_writer(tmp_path):
    """The same books, in-process: a writer raising ENOSPC from 0.5 s to 2.5 s into a 3.5 s run."""
    t0 = time.monotonic()
    pending_seen = []

    def full_for_a_while(table, path):
        if 0.5 <= time.monotonic() - t0 < 2.5:
            pending_seen.append(c.flusher.pending_rows)
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_parquet_atomic(table, path)

    fake.configure(gpus=GPUS, served_log=str(tmp_path / "served.log"))
    c = Collector(CollectorConfig(data_dir=tmp_path / "data", host="t", sampling=SamplingConfig(), flush_s=FLUSH_S,
                                  duration_s=3.5, nvml_module=FAKE, compact=False, max_pending_rows=BOUND))
    c.open()
    c.flusher._write = full_for_a_while
    t0 = time.monotonic()
    assert c.run() == 0  # space returned before the stop: everything pending was written
    on_disk = power_keys(read_power(tmp_path / "data"))
    assert len(on_disk) == len(set(on_disk))
    lost = [k for k in served_samples(tmp_path / "served.log") if k not in set(on_disk)]
    assert c.counters.get("rows_dropped") > 0 and len(lost) == c.counters.get("rows_dropped")
    assert pending_seen and max(pending_seen) <= BOUND + ONE_FLUSH  # bound after each failure, plus the new flush


def test_folder_sync_failing_after_the_rename_does_not_write_rows_twice(tmp_path, monkeypatch):
    """A bug found here: fsync of the folder failing after the rename (EIO, a full journal) made the
    flusher keep rows that were already in a visible file, and write them again at the next flush."""
    from collectors import atomic
    from tests.test_nvml_units import _table

    calls = {"n": 0}
    real = atomic.fsync_dir

    def failing_once(path):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    monkeypatch.setattr(atomic, "fsync_dir", failing_once)
    counters = Counters()
    f = Flusher(tmp_path, "h", counters)
    base = 491_000 * 3_600_000_000_000 + 10**9
    f.add(_table([base + i * 10**8 for i in range(10)]))
    assert f.flush() and f.pending_rows == 0
    f.add(_table([base + (10 + i) * 10**8 for i in range(5)]))
    assert f.flush()
    keys = power_keys(read_power(tmp_path))
    assert len(keys) == len(set(keys)) == 15
    assert counters.get("dir_sync_errors") == 1 and counters.get("write_errors") == 0


def test_a_flush_bigger_than_the_bound_is_written_whole_while_the_disk_is_fine(tmp_path):
    """A bug found here: the bound was applied before the write was even tried, so a first flush
    (the driver buffer's 2.4 s of history on 4 GPUs: ~470 rows) over a small bound was dropped
    with a false 'disk still failing' error on a healthy disk."""
    from tests.test_nvml_units import _table

    counters = Counters()
    f = Flusher(tmp_path, "h", counters, max_pending_rows=25)
    base = 491_000 * 3_600_000_000_000 + 10**9
    f.add(_table([base + i * 10**8 for i in range(40)]))
    assert f.flush()
    assert len(power_keys(read_power(tmp_path))) == 40 and counters.get("rows_dropped") == 0
