"""The collector's live endpoint on the fake NVML with scripted signals: the exported gauges equal the known
answers, and a real Prometheus server that scrapes it stores the same values."""

from __future__ import annotations

import math
import signal
import time

import pytest

from tests.cli_util import invoke
from tests.days import slow_setup
from tests.live_helpers import PrometheusServer, free_port, grid_window, host_window, pick, scrape, wait_for_endpoint
from tests.nvml_helpers import collector_process

WINDOWS = (2, 10, 60)
RUN_S = 8.5


@pytest.fixture(scope="module")
@slow_setup  # its tests read the live endpoint and Prometheus for the signals' 8.5 s, in real time (~12 s)
def live_run(tmp_path_factory):
    """Four GPUs: a 1 s square wave 100 ↔ 700 W and its mirror image (on sample grids offset by 5 and 12 ms,
    so their sum is a flat 800 W), a 10 W/s ramp from T0 + 2 s, and a single 60 ms spike to 700 W at
    T0 + 3.5 s. A Prometheus server scrapes the endpoint every second, when installed."""
    tmp = tmp_path_factory.mktemp("live")
    t0 = math.ceil(time.time()) + 3  # the collector (pyarrow import) and Prometheus start before the ramp
    sigs = {
        "0": {"kind": "square", "low_w": 100, "high_w": 700, "period_s": 1, "grid_offset_us": 5000},
        "1": {"kind": "square", "low_w": 700, "high_w": 100, "period_s": 1, "grid_offset_us": 12000},
        "2": {"kind": "ramp", "low_w": 100, "slope_w_per_s": 10, "start_unix_s": t0 + 2},
        "3": {"kind": "spike", "low_w": 100, "high_w": 700, "at_unix_s": t0 + 3.5, "width_s": 0.06},
    }
    port = free_port()
    proc = collector_process(tmp / "data", {"gpus": 4, "signal": sigs}, "--metrics-listen", f"127.0.0.1:{port}")
    prom = None
    try:
        wait_for_endpoint(port, proc)
        alerts = tmp / "alerts.yaml"
        alerts.write_text("rules: [{name: square_swing, level: gpu, quantity: swing_2s_w, threshold: 500}]\n")
        rule_file = tmp / "wattline-rules.yml"
        one = invoke("alert-rules", "--alerts", str(alerts), "--out", str(rule_file))
        assert one.exit_code == 0, one.output
        try:
            prom = PrometheusServer(tmp, port, rule_file=rule_file)
        except pytest.skip.Exception as exc:
            prom = exc  # the Prometheus test skips with this reason; the known-answer test still runs
        yield {"t0": t0, "sigs": sigs, "port": port, "proc": proc, "prom": prom}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        if isinstance(prom, PrometheusServer):
            prom.close()


def _expect(values):
    return max(values), min(values), max(values) - min(values)


def _check_gpu(sig, anchor_us, got: dict, where=""):
    for w in WINDOWS:
        mx, mn, sw = _expect(grid_window(sig, anchor_us, w))
        assert got[w] == pytest.approx((mx, mn, sw), abs=1e-9), (where, w, anchor_us)


def test_exported_swings_equal_the_known_answers(live_run):
    port, sigs, t0 = live_run["port"], live_run["sigs"], live_run["t0"]
    seen = {"square": 0, "spike_in_2s": 0, "spike_left_2s": 0, "ramp_2s": 0, "host": 0}
    while time.time() < t0 + RUN_S:
        s = scrape(port)
        for g, sig in sigs.items():
            anchor = pick(s, "wattline_gpu_last_sample_timestamp_seconds", gpu=g)
            got = {w: tuple(pick(s, f"wattline_gpu_power_{k}_watts", gpu=g, window=f"{w}s") for k in ("max", "min", "swing"))
                   for w in WINDOWS}
            anchor_us = round(anchor * 1e6)
            assert anchor_us % 1000 in (0, int(sig.get("grid_offset_us", 0)) % 1000)
            _check_gpu(sig, anchor_us, got, where=f"gpu {g}")
            # the hand-known answers, when this scrape's window is in that phase
            if g in "01":
                assert got[2] == (700.0, 100.0, 600.0)
                seen["square"] += 1
            if g == "3" and anchor_us - 2_000_000 < (t0 + 3.5) * 1e6 <= anchor_us:
                assert got[2] == (700.0, 100.0, 600.0)
                seen["spike_in_2s"] += 1
            if g == "3" and (t0 + 3.56) * 1e6 <= anchor_us - 2_000_000:
                assert got[2][2] == 0.0 and got[10][2] == 600.0
                seen["spike_left_2s"] += 1
            if g == "2" and anchor_us - 2_000_000 >= (t0 + 2) * 1e6:
                assert got[2][2] == pytest.approx(19.8, abs=1e-9)  # 10 W/s × 1.98 s between the window's samples
                seen["ramp_2s"] += 1
        h_anchor = pick(s, "wattline_host_last_slot_timestamp_seconds")
        if h_anchor is not None:
            a = round(h_anchor * 1e6)
            assert a % 20_000 == 0  # the common grid
            for w in WINDOWS:
                exp = _expect(host_window(sigs, a, w))
                got = tuple(pick(s, f"wattline_host_power_{k}_watts", window=f"{w}s") for k in ("max", "min", "swing"))
                assert got == pytest.approx(exp, abs=1e-9), ("host", w, a)
            seen["host"] += 1
        time.sleep(0.25)
    assert all(seen.values()), seen
    assert pick(s, "wattline_host_gpus") == 4
    assert pick(s, "wattline_host_incomplete_slots_total") <= 1
    assert pick(s, "wattline_gpu_power_average_watts", gpu=0) == pytest.approx(400.0)
    assert pick(s, "wattline_gpu_energy_joules_total", gpu=0) > 4e6
    assert 0 <= pick(s, "wattline_gpu_last_sample_age_seconds", gpu=0) < 1.5


def test_a_real_prometheus_stores_the_same_values(live_run):
    prom = live_run["prom"]
    if not isinstance(prom, PrometheusServer):
        raise prom
    sigs, t0 = live_run["sigs"], live_run["t0"]
    while time.time() < t0 + RUN_S + 1.5:
        time.sleep(0.2)
    anchors = {}
    for r in prom.query("wattline_gpu_last_sample_timestamp_seconds[2m]"):
        for ts, v in r["values"]:
            anchors[(r["metric"]["gpu"], ts)] = round(float(v) * 1e6)
    stored = prom.query("wattline_gpu_power_swing_watts[2m]")
    assert {r["metric"]["gpu"] for r in stored} == set(sigs)
    assert all(r["metric"]["host"] == "testhost" and r["metric"]["job"] == "wattline" for r in stored)
    checked = 0
    for r in stored:
        g, w = r["metric"]["gpu"], int(r["metric"]["window"].rstrip("s"))
        for ts, v in r["values"]:
            _, _, sw = _expect(grid_window(sigs[g], anchors[(g, ts)], w))
            assert float(v) == pytest.approx(sw, abs=1e-9), (g, w, ts)
            checked += 1
    assert checked >= 4 * 3 * 4  # 4 GPUs × 3 windows × at least 4 scrapes
    h_anchor = {ts: round(float(v) * 1e6) for r in prom.query("wattline_host_last_slot_timestamp_seconds[2m]")
                for ts, v in r["values"]}
    for r in prom.query('wattline_host_power_swing_watts{window="2s"}[2m]'):
        for ts, v in r["values"]:
            assert float(v) == pytest.approx(_expect(host_window(sigs, h_anchor[ts], 2))[2], abs=1e-9)
    assert prom.query('wattline_gpu_power_swing_watts{gpu="0",window="2s"}')[0]["value"][1] == "600"


def test_prometheus_evaluates_the_rules_written_by_alert_rules(live_run):
    """`wattline alert-rules` output loaded by the same Prometheus: the 600 W square waves fire the
    2 s swing rule, the 19.8 W ramp does not."""
    prom = live_run["prom"]
    if not isinstance(prom, PrometheusServer):
        raise prom
    end = time.monotonic() + 15
    while time.monotonic() < end:
        firing = {r["metric"]["gpu"] for r in prom.query('ALERTS{alertname="square_swing",alertstate="firing"}')}
        if {"0", "1"} <= firing:
            break
        time.sleep(0.5)
    assert {"0", "1"} <= firing and "2" not in firing, firing


def test_inventory_labels_tdp_and_provisioned_power(tmp_path):
    """With --inventory: role, endpoint and training_job labels; TDP from the inventory (500 W, not the
    700 W enforced limit), so a constant 600 W counts as time above TDP; the host's provisioned power
    drives a pct_of_provisioned rule (700 W of 2000 W = 35 %)."""
    from tests.live_helpers import Webhook

    inv = tmp_path / "inventory.yaml"
    inv.write_text("""
fleets:
  - name: f
    clusters:
      - name: c
        hosts:
          - name: testhost
            role: inference
            provisioned_w: 2000
            gpus: [{index: 0, tdp_w: 500}, {index: 1, tdp_w: 700}]
            endpoints: [{name: Qwen/Qwen3-8B, gpus: [0]}]
            jobs: [{name: llm-7b, gpus: [1]}]
""")
    hook = Webhook()
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"webhook: {{url: '{hook.url}'}}\n"
                     "rules: [{name: near_feed, level: host, quantity: pct_of_provisioned, threshold: 30}]\n")
    port = free_port()
    proc = collector_process(tmp_path / "data", {"gpus": 2, "signal": {
        "0": {"kind": "constant", "low_w": 600}, "1": {"kind": "constant", "low_w": 100}}},
        "--metrics-listen", f"127.0.0.1:{port}", "--inventory", str(inv), "--alerts", str(rules))
    try:
        wait_for_endpoint(port, proc)
        time.sleep(2.5)
        s = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        hook.close()
    g0 = dict(next(lab for (n, lab) in s if n == "wattline_gpu_power_watts" and ("gpu", "0") in lab))
    assert g0 == {"host": "testhost", "gpu": "0", "uuid": g0["uuid"], "role": "inference", "endpoint": "Qwen/Qwen3-8B"}
    assert pick(s, "wattline_gpu_power_watts", gpu=1, training_job="llm-7b", role="inference") == 100.0
    assert pick(s, "wattline_gpu_tdp_watts", gpu=0) == 500.0 and pick(s, "wattline_gpu_tdp_watts", gpu=1) == 700.0
    above = pick(s, "wattline_gpu_above_tdp_seconds_total", gpu=0)
    assert 2.0 < above < 6.0 and pick(s, "wattline_gpu_above_tdp_seconds_total", gpu=1) == 0.0
    assert pick(s, "wattline_host_provisioned_watts", role="inference") == 2000.0
    assert pick(s, "wattline_host_power_watts") == 700.0
    fired = [e for _, e in hook.received if e["status"] == "firing"]
    assert len(fired) == 1 and fired[0]["value"] == 35.0 and fired[0]["labels"]["role"] == "inference"
