"""The collector as a process: exit codes, SIGTERM flush, SIGKILL durability and restart without duplicates."""

from __future__ import annotations

import random
import signal
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from collectors.nvml.nvml_source import NvmlUnavailable, load_nvml
from tests.nvml_helpers import collector_process, power_files, read_power, series, wait_for_new_file


def test_no_driver_is_one_clear_line_and_exit_2(tmp_path):
    p = collector_process(tmp_path, {"no_driver": True})
    out, err = p.communicate(timeout=30)
    assert p.returncode == 2
    assert err.strip().count("\n") == 0, err
    assert err.startswith("error: NVML is not available on this machine") and "Driver Not Loaded" in err


def test_real_binding_without_a_gpu_exits_2(tmp_path):
    try:
        load_nvml("pynvml")
        pytest.skip("this machine has a working NVML")
    except NvmlUnavailable:
        pass
    from collectors.nvml.cli import command

    r = CliRunner().invoke(command, ["--data-dir", str(tmp_path), "--nvml-module", "pynvml"])
    assert r.exit_code == 2 and "error: NVML is not available" in r.output


def test_sigterm_flushes_everything_and_exits_0(tmp_path):
    p = collector_process(tmp_path, {"gpus": 2}, "--flush-seconds", "60")
    while "collecting GPUs" not in (line := p.stderr.readline()):
        assert line, "collector ended before it started sampling"
    time.sleep(1.5)
    t_term = time.time()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    t = read_power(tmp_path)
    for g in (0, 1):
        field = series(t, g, "nvml-field")
        assert len(field) >= 12  # nothing was flushed before the signal: all came from the final flush
        last = pa.array([field[-1]["ts"]], pa.timestamp("ns", "UTC")).cast(pa.int64())[0].as_py() / 1e9
        assert last >= t_term - 0.5
        assert series(t, g, "nvml-buffer")


def _assert_every_visible_file_reads(data_dir):
    t = read_power(data_dir)  # reads and schema-checks every visible *.parquet
    assert not [p for p in (data_dir / "power").rglob("*.parquet") if p.name.startswith(".")]
    return t


@pytest.mark.slow  # three real collector processes, each killed after a flush
def test_sigkill_loses_at_most_one_flush_interval_and_restart_has_no_duplicates(tmp_path):
    rng = random.Random(10)
    flush_s = 1.0
    for trial in range(3):
        before = power_files(tmp_path)
        p = collector_process(tmp_path, {"gpus": 2}, "--flush-seconds", str(flush_s))
        wait_for_new_file(tmp_path, p, before)
        time.sleep(rng.uniform(0.3, 2.0))
        t_kill = time.time()
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        t = _assert_every_visible_file_reads(tmp_path)
        for g in (0, 1):
            ts = pc.max(series_ts := pa.array([r["ts"] for r in series(t, g, "nvml-field")],
                                              pa.timestamp("ns", "UTC")).cast(pa.int64())).as_py() / 1e9
            # lost at most the last flush interval (+ a tick and the write, with slack for a busy CI)
            assert ts >= t_kill - flush_s - 0.8, (trial, t_kill - ts)
            assert len(series_ts) > 0
    # restart: continues, and the driver buffer overlap is not written twice
    before = power_files(tmp_path)
    p = collector_process(tmp_path, {"gpus": 2}, "--flush-seconds", str(flush_s))
    wait_for_new_file(tmp_path, p, before)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    t = _assert_every_visible_file_reads(tmp_path)
    keys = pa.table({"gpu": t["gpu"], "source": t["source"].cast(pa.string()), "ts": t["ts"]})
    assert keys.group_by(["gpu", "source", "ts"]).aggregate([]).num_rows == t.num_rows  # no duplicates


def test_collect_and_import_are_registered_in_wattline():
    from pipeline.cli import main

    r = CliRunner().invoke(main, ["collect", "--help"])
    assert r.exit_code == 0 and "--buffer / --no-buffer" in r.output and "--energy-seconds" in r.output
    r = CliRunner().invoke(main, ["import", "nvidia-smi", "--help"])
    assert r.exit_code == 0 and "--tz" in r.output and "--power-draw" in r.output


def test_unknown_gpu_index_is_one_line_and_exit_2(tmp_path):
    from collectors.nvml.cli import command
    from tests.fakes import fake_pynvml

    fake_pynvml.configure(gpus=2)
    r = CliRunner().invoke(command, ["--gpus", "5", "--data-dir", str(tmp_path), "--nvml-module", "tests.fakes.fake_pynvml"])
    assert r.exit_code == 2 and r.output.strip() == "error: no such GPU index [5]: this machine has 2 GPU(s)"
