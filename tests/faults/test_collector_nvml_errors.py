"""Item 2: every NVML fault at once in one collector process (the real CLI on the fake NVML).

One GPU lost mid-run, one field NOT_SUPPORTED, energy counters that go backwards (a 5 J glitch and a
driver-reload reset), and a call that blocks for 2 s. The single-fault cases run in-process in
``tests/test_nvml_sampler.py``; here they overlap, as on a sick host, and the process is checked
from outside: its files, its status file, its log, and what the fake served.
"""

from __future__ import annotations

import json

from collectors.nvml.daemon import status_path
from tests.faults.inject import power_keys, served_samples
from tests.nvml_helpers import collector_process, max_gap_s, read_power, series

LOST, NOT_SUPPORTED, GLITCH, RESET, STALL = 1, 2, 0, 2, 3
PLAN = {
    "gpus": 4,
    "lost": {str(LOST): [1.0, 2.0]},  # every call raises GPU_IS_LOST for 1 s
    "not_supported": {str(NOT_SUPPORTED): ["temperature", "instant"]},  # a slow field and field 186
    "energy_glitch": {str(GLITCH): 1.0},  # one read 5 J below the previous one
    "energy_reset": {str(RESET): 1.5},  # counter restarts near zero (driver reload)
    "stall": {str(STALL): [1.0, 2.0]},  # the first power read after 1 s blocks 2 s
}


def test_lost_gpu_unsupported_field_backwards_energy_and_a_stall_at_once(tmp_path):
    data = tmp_path / "data"
    log = tmp_path / "served.log"
    p = collector_process(data, {**PLAN, "served_log": str(log)}, "--duration-seconds", "4",
                          "--flush-seconds", "0.5", "--energy-seconds", "0.2")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    table = read_power(data)

    # the GPUs without a blocking or lost call: no gap in the 20 ms buffer trace; the 100 ms field
    # trace pauses only for the watchdog's reaction to the stall (~0.25-0.5 s, docs/collector.md)
    for g in (GLITCH, NOT_SUPPORTED):
        assert max_gap_s(series(table, g, "nvml-buffer")) < 0.1, g
        assert max_gap_s(series(table, g, "nvml-field")) < 1.0, g  # < the 2 s stall: isolated (slack for a busy CI)
        assert len(series(table, g, "nvml-field")) >= 25, g
    # the faulty GPUs: a gap where the fault was, sampled again after it
    assert max_gap_s(series(table, LOST, "nvml-field")) >= 0.9
    assert max_gap_s(series(table, STALL, "nvml-field")) >= 1.9
    for g in (LOST, STALL):
        ts = [r["ts"] for r in series(table, g, "nvml-field")]
        assert (max(ts) - min(ts)).total_seconds() > 3.0, g  # recovered: rows after the fault

    # nothing the fake served was lost, even on the faulty GPUs: gaps are the faults', not the collector's
    on_disk = set(power_keys(table))
    assert not [k for k in served_samples(log) if k not in on_disk]

    # NOT_SUPPORTED: that column null on that GPU only, other slow columns still read
    slow = [r for r in series(table, NOT_SUPPORTED, "nvml-field") if r["sm_clock_mhz"] is not None]
    assert slow and all(r["temp_c"] is None for r in slow)
    field = series(table, NOT_SUPPORTED, "nvml-field")
    assert all(r["power_w"] is None and r["power_avg_w"] > 0 for r in field)  # instant null, 1 s average kept
    assert all(r["temp_c"] is not None for r in series(table, GLITCH, "nvml-field") if r["sm_clock_mhz"] is not None)

    # energy: never decreasing, never negative, on every GPU
    for g in range(PLAN["gpus"]):
        e = [r["energy_j"] for r in series(table, g, "nvml-field") if r["energy_j"] is not None]
        assert e and min(e) >= 0, g
        assert all(b >= a for a, b in zip(e, e[1:], strict=False)), (g, [b - a for a, b in zip(e, e[1:], strict=False) if b < a])

    # every event counted in the status file...
    status = json.loads(status_path(data, "testhost").read_text())["gpus"]
    assert status[str(LOST)]["errors_GpuIsLost"] >= 1 and status[str(LOST)]["recoveries"] == 1
    assert status[str(LOST)]["gap_s"] >= 0.9 and status[str(LOST)]["state"] == "ok"
    assert status[str(NOT_SUPPORTED)]["not_supported_temp_c"] == 1
    assert status[str(NOT_SUPPORTED)]["null_power_w"] == len(field)  # every row with a null instant power
    assert status[str(GLITCH)]["energy_backwards"] == 1
    assert status[str(RESET)]["energy_resets"] == 1
    assert status[str(STALL)]["stalled_calls"] == 1 and status[str(STALL)]["isolated_after_stall"] == 1
    for g in (GLITCH, NOT_SUPPORTED):
        assert not any(k.startswith("errors_") for k in status[str(g)]), status[str(g)]
    assert "null_power_w" not in status[str(GLITCH)]
    # ...and logged, each with the GPU it happened on
    for needle in (f"gpu {LOST}: NVMLError_GpuIsLost", f"gpu {LOST}: recovered after",
                   f"gpu {NOT_SUPPORTED}: temp_c not supported", f"gpu {NOT_SUPPORTED}: the driver returned no power_w",
                   f"gpu {GLITCH}: energy counter went backwards (energy_backwards)",
                   f"gpu {RESET}: energy counter went backwards (energy_resets)",
                   f"gpu {STALL}: NVML call blocked", f"gpu {STALL}: NVML calls took"):
        assert needle in err, needle
