"""The real collector (in-process) against the fake NVML: sampling cadence, sources, and every GPU fault."""

from __future__ import annotations

import json
import statistics
import time

import pyarrow as pa
import pytest

from collectors.nvml.daemon import Collector, CollectorConfig, status_path
from collectors.nvml.gpu_sampler import SamplingConfig
from tests.fakes import fake_pynvml as fake
from tests.nvml_helpers import FAKE, max_gap_s, read_power, series


def run_fake(tmp_path, seconds, fake_cfg, patch=None, **sampling):
    fake.configure(**fake_cfg)
    cfg = CollectorConfig(data_dir=tmp_path, host="t", sampling=SamplingConfig(**sampling), flush_s=1.0,
                          duration_s=seconds, nvml_module=FAKE, compact=False)
    c = Collector(cfg)
    c.open()
    if patch:
        patch(c)
    t0 = time.time()
    code = c.run()
    assert code == 0
    return c, read_power(tmp_path), t0


def _ts(rows):
    return pa.array([r["ts"] for r in rows], pa.timestamp("ns", "UTC")).cast(pa.int64()).to_pylist()


def test_one_field_call_per_tick_on_driver_timestamps_without_drift(tmp_path):
    c, t, t0 = run_fake(tmp_path, 2.0, {"gpus": 2, "driver_clock_offset_s": 5.0}, buffer=False)
    for g in (0, 1):
        rows = series(t, g, "nvml-field")
        assert 17 <= len(rows) <= 23, len(rows)  # 2 s at 100 ms, plus the final tick
        ts = _ts(rows)
        assert min(ts) / 1e9 > t0 + 4.0  # the driver's clock (5 s ahead), not the host's
        assert statistics.median(b - a for a, b in zip(ts, ts[1:], strict=False)) == pytest.approx(1e8, rel=0.05)
        assert all(r["power_w"] > 0 and r["power_avg_w"] > 0 for r in rows)
    field_rows = sum(1 for r in t.to_pylist() if r["source"] == "nvml-field")
    assert fake.CALLS["nvmlDeviceGetFieldValues"] == field_rows  # instant + average in ONE call per row
    assert fake.CALLS["nvmlDeviceGetSamples"] == 0


def test_slow_fields_and_energy_only_at_their_own_rates(tmp_path):
    c, t, _ = run_fake(tmp_path, 2.5, {"gpus": 1}, slow_s=1.0, energy_s=1.0)
    rows = series(t, 0, "nvml-field")
    with_slow = [r for r in rows if r["sm_clock_mhz"] is not None]
    assert 2 <= len(with_slow) <= 4 and len(rows) >= 22
    assert all(r["temp_c"] and r["power_limit_w"] == 700.0 and r["mem_used_mib"] for r in with_slow)
    assert 3 <= fake.CALLS["nvmlDeviceGetTotalEnergyConsumption"] <= 5  # 0, 1, 2 s and the final read
    assert sum(r["energy_j"] is not None for r in rows) == fake.CALLS["nvmlDeviceGetTotalEnergyConsumption"]


def test_buffer_trace_is_deduplicated_at_driver_resolution(tmp_path):
    c, t, _ = run_fake(tmp_path, 2.5, {"gpus": 2})
    for g in (0, 1):
        ts = _ts(series(t, g, "nvml-buffer"))
        assert len(ts) == len(set(ts)) and ts == sorted(ts)
        assert statistics.median(b - a for a, b in zip(ts, ts[1:], strict=False)) / 1e6 == pytest.approx(20, abs=2)
        assert max(b - a for a, b in zip(ts, ts[1:], strict=False)) < 60e6  # drained often enough: no hole
    assert c.counters.get("buffer_overruns", 0) == 0


@pytest.mark.parametrize("fault,error", [("lost", "errors_GpuIsLost"), ("timeout", "errors_Timeout")])
def test_a_failing_gpu_leaves_a_gap_and_recovers_while_others_keep_sampling(tmp_path, fault, error):
    c, t, _ = run_fake(tmp_path, 3.0, {"gpus": 2, fault: {"1": [0.6, 1.6]}})
    bad = series(t, 1, "nvml-field")
    assert max_gap_s(bad) >= 0.9  # the gap is left, not filled
    assert c.counters.get(error, gpu=1) >= 1 and c.counters.get("recoveries", gpu=1) == 1
    assert max_gap_s(series(t, 0, "nvml-field")) < 0.6  # the healthy GPU saw no gap (slack for a busy CI)
    assert max(_ts(bad)) / 1e9 > time.time() - 1.0  # sampled again after the fault
    snap = json.loads(status_path(tmp_path, "t").read_text())
    assert snap["gpus"]["1"][error] >= 1


def test_not_supported_field_is_null_and_counted_once(tmp_path):
    c, t, _ = run_fake(tmp_path, 2.2, {"gpus": 2, "not_supported": {"0": ["temperature"]}})
    g0 = [r for r in series(t, 0, "nvml-field") if r["sm_clock_mhz"] is not None]
    g1 = [r for r in series(t, 1, "nvml-field") if r["sm_clock_mhz"] is not None]
    assert g0 and all(r["temp_c"] is None for r in g0)
    assert g1 and all(r["temp_c"] is not None for r in g1)
    assert c.counters.get("not_supported_temp_c", gpu=0) == 1


def test_energy_counter_reset_is_never_negative_energy(tmp_path):
    c, t, _ = run_fake(tmp_path, 2.5, {"gpus": 2, "energy_reset": {"0": 1.0}, "energy_glitch": {"1": 0.5}},
                       energy_s=0.2)
    for g in (0, 1):
        e = [r["energy_j"] for r in series(t, g, "nvml-field") if r["energy_j"] is not None]
        assert len(e) >= 10
        assert all(b >= a for a, b in zip(e, e[1:], strict=False))
    assert c.counters.get("energy_resets", gpu=0) == 1
    assert c.counters.get("energy_backwards", gpu=1) == 1  # the glitch GPU exists now (it was GPU 1 of 1)


def test_a_stalled_call_is_isolated_so_other_gpus_have_no_gap(tmp_path):
    c, t, _ = run_fake(tmp_path, 3.5, {"gpus": 3, "stall": {"0": [0.8, 2.0]}})
    for g in (1, 2):
        assert max_gap_s(series(t, g, "nvml-buffer")) < 0.1  # the ~20 ms trace has no hole at all
        assert max_gap_s(series(t, g, "nvml-field")) < 1.2  # the watchdog's reaction (~0.5 s; slack for a busy CI), not 2 s
    assert max_gap_s(series(t, 0, "nvml-field")) >= 1.9
    assert c.counters.get("stalled_calls", gpu=0) == 1
    assert c.counters.get("isolated_after_stall", gpu=0) == 1


def test_disk_full_mid_run_never_stops_sampling_and_nothing_is_lost(tmp_path):
    import errno

    from collectors.atomic import write_parquet_atomic

    t_start = time.monotonic()

    def flaky_write(table, path):  # the disk is full from 0.5 s to 2.5 s into the run
        if 0.5 <= time.monotonic() - t_start < 2.5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_parquet_atomic(table, path)

    def patch(c):
        c.flusher._write = flaky_write

    c, t, _ = run_fake(tmp_path, 3.5, {"gpus": 2}, patch=patch)
    assert c.counters.get("write_errors") >= 1 and c.counters.get("rows_dropped") == 0
    for g in (0, 1):
        field = series(t, g, "nvml-field")
        assert len(field) >= 30 and max_gap_s(field) < 0.6  # sampled all along, written once space returned
