"""`wattline alert-rules`: the collector's rules as Prometheus alerting rules, checked by promtool."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from collectors.nvml.alerts import AlertsFile, prometheus_rules
from tests.cli_util import invoke, one_line_error

RULES = """
webhook: {url: "http://127.0.0.1:9/hook"}
rules:
  - {name: gpu_swing, level: gpu, quantity: swing_2s_w, threshold: 500, for: 1.5s, labels: {severity: page}}
  - {name: gpu_hot, level: gpu, quantity: pct_of_tdp, threshold: 100, for: 1m}
  - {name: gpu_idle, level: gpu, quantity: power_w, threshold: 50, op: below}
  - {name: gpu_avg, level: gpu, quantity: power_avg_w, threshold: 650}
  - {name: host_near_feed, level: host, quantity: pct_of_provisioned, threshold: 90}
  - {name: host_swing, level: host, quantity: swing_10s_pct_of_provisioned, threshold: 25, summary: rack swings}
  - {name: host_swing_w, level: host, quantity: swing_60s_w, threshold: 2000}
"""

EXPECTED = {
    "gpu_swing": 'wattline_gpu_power_swing_watts{window="2s"} > 500',
    "gpu_hot": '100 * wattline_gpu_power_max_watts{window="2s"} / ignoring(window) wattline_gpu_tdp_watts > 100',
    "gpu_idle": 'wattline_gpu_power_min_watts{window="2s"} < 50',
    "gpu_avg": "wattline_gpu_power_average_watts > 650",
    "host_near_feed": '100 * wattline_host_power_max_watts{window="2s"} / ignoring(window) wattline_host_provisioned_watts > 90',
    "host_swing": '100 * wattline_host_power_swing_watts{window="10s"} / ignoring(window) wattline_host_provisioned_watts > 25',
    "host_swing_w": 'wattline_host_power_swing_watts{window="60s"} > 2000',
}


def test_each_quantity_maps_to_the_exported_metric():
    out = prometheus_rules(AlertsFile.model_validate(yaml.safe_load(RULES)))
    rules = {r["alert"]: r for r in out["groups"][0]["rules"]}
    assert {k: r["expr"] for k, r in rules.items()} == EXPECTED
    assert rules["gpu_swing"]["for"] == "1500ms" and rules["gpu_hot"]["for"] == "60000ms"
    assert "for" not in rules["gpu_idle"]
    assert rules["gpu_swing"]["labels"] == {"wattline_rule": "gpu_swing", "level": "gpu", "severity": "page"}
    assert rules["host_swing"]["annotations"]["summary"] == "rack swings"


def test_the_written_file_passes_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing on CI: apt-get install -y prometheus")
        pytest.skip("promtool not installed (Debian package `prometheus`); CI installs it")
    src = tmp_path / "alerts.yaml"
    src.write_text(RULES)
    out = tmp_path / "wattline-rules.yml"
    r = invoke("alert-rules", "--alerts", str(src), "--out", str(out))
    assert r.exit_code == 0 and "7 rule(s)" in r.output
    check = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 7 rules found" in check.stdout, check.stdout + check.stderr
    assert invoke("alert-rules", "--alerts", str(src)).output == out.read_text()  # stdout: the same text


def test_a_malformed_rules_file_is_one_error_line(tmp_path):
    bad = tmp_path / "alerts.yaml"
    bad.write_text("rules: [{name: a, level: host, quantity: pct_of_tdp, threshold: 1}]")
    one_line_error(invoke("alert-rules", "--alerts", str(bad)), "host-level quantities")


def test_the_deploy_examples_load():
    from pathlib import Path

    from collectors.nvml.alerts import load_alerts

    deploy = Path(__file__).resolve().parent.parent / "deploy" / "collector"
    rules = load_alerts(deploy / "alerts.example.yaml")
    assert [r.name for r in rules.rules][:1] == ["gpu_swing_2s"] and prometheus_rules(rules)["groups"][0]["rules"]
    docs = list(yaml.safe_load_all((deploy / "daemonset.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["DaemonSet", "Service"]
    args = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-listen" in args and "--allow-remote" in args
    assert yaml.safe_load((deploy / "prometheus-scrape.yml").read_text())["scrape_configs"][0]["job_name"] == "wattline"
