"""The fourth assignment source: dcgm-exporter's Kubernetes pod labels, read by `wattline import
prometheus` from a real Prometheus that scraped a dcgm-exporter-format endpoint on 127.0.0.1.
infer-0's GPU 0 is held by pod chat-small-… (endpoint ep-a by the inventory's `kubernetes:` rules)
until 12:00 and by chat-big-… (ep-b) after; GPU 1 by a notebook pod no rule maps.

Prometheus stores a scraped sample only near "now"; the exporter stamps each sample with its own
time on the test's day (one 10 s step per scrape) and the server accepts that day's samples through
its out-of-order window. It keeps answering for the old pod's series for its lookback (5 min) after
the new pod's first sample, as a backfilled history does."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.runner import run_day
from tests.builders import DAY
from tests.cli_util import invoke, one_line_error
from tests.days import slow_setup
from tests.noon_split import (
    ASSETS,
    NOON_NS,
    NOTEBOOK,
    POD_A,
    POD_B,
    RULES,
    START_NS,
    STEP_S,
    STEPS,
    UUID,
    PodExporter,
    _check_split,
    _inventory,
    _power_day,
    scraped,
)
from tests.prometheus_harness import PROMETHEUS

pytestmark = pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason=f"{PROMETHEUS} is missing: apt-get install -y prometheus")


@pytest.fixture(scope="module")
@slow_setup  # a real Prometheus that scrapes its series in real time (~12 s)
def prometheus(tmp_path_factory):
    """A real Prometheus on 127.0.0.1 that scraped the whole 20 minutes; yields its URL."""
    yield from scraped(tmp_path_factory.mktemp("prom"), PodExporter())


def _import(url, d, *extra):
    return invoke("import", "prometheus", "--url", url, "--start", str(START_NS // 10**9),
                  "--end", str(START_NS // 10**9 + STEPS * STEP_S - 1), "--data-dir", str(d), *extra)


def _held(d):
    rows = [r for f in sorted((d / "assignments").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted((r["source"], r["host"], r["gpu"], r["gpu_uuid"], r["name"], r["from_ts"], r["to_ts"]) for r in rows)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_pod_labels_split_the_gpu_at_noon(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d, kubernetes=RULES)
    t, w = _power_day(d)  # the 10 Hz samples of the other sources' tests: the power the split is checked on
    out = _import(prometheus, d)
    assert out.exit_code == 0, out.output
    assert "pod labels: 2 assignment run(s) of 1 GPU(s) stored" in out.output
    assert f"pods no kubernetes rule maps (steps held by none): research/{NOTEBOOK} (1200)" in out.output
    at = lambda ns: dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)  # noqa: E731
    end = START_NS + STEPS * STEP_S * 10**9
    # the old pod's series still answers for 5 min after noon: the newer one holds the GPU
    assert _held(d) == [("prometheus", "infer-0", 0, UUID, "ep-a", at(START_NS), at(NOON_NS)),
                        ("prometheus", "infer-0", 0, UUID, "ep-b", at(NOON_NS), at(end))]
    result = run_day(d, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert result.success, result.error
    _check_split(d, t, w)
    # GPU 1 draws power all along with no endpoint holding it: a WARN naming it and its hours
    failed = {c.check: c for c in result.failed_checks}
    assert failed["gpus_held"].severity == "WARN"
    assert "1 GPU(s) draw power" in failed["gpus_held"].description
    assert "infer-0/1 in hour(s) 11, 12 UTC" in failed["gpus_held"].description
    # importing the same range again replaces its assignments (no conflict with itself, no second copy)
    assert _import(prometheus, d).exit_code == 0
    assert len(_held(d)) == 2


def test_prometheus_and_a_file_that_disagree_are_one_error_naming_both(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d, kubernetes=RULES)
    assert _import(prometheus, d).exit_code == 0
    noon = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC).isoformat()
    f = tmp_path / "held.csv"
    f.write_text(f"gpu_uuid,kind,name,from_ts\n{UUID},endpoint,ep-a,{noon}\n")
    one_line_error(invoke("import", "assignments", str(f), "--data-dir", str(d)),
                   "assignments disagree, nothing written", "prometheus gives GPU 0 of host 'infer-0' to endpoint 'ep-b'",
                   "file gives GPU 0 of host 'infer-0' to endpoint 'ep-a'")
    assert [r[0] for r in _held(d)] == ["prometheus", "prometheus"]
    # the other way round: the file first, then the import refuses and writes neither power nor assignments
    e = tmp_path / "other"
    _inventory(e, kubernetes=RULES)
    assert invoke("import", "assignments", str(f), "--data-dir", str(e)).exit_code == 0
    one_line_error(_import(prometheus, e), "assignments disagree, nothing written", "prometheus gives", "file gives")
    assert not (e / "power").exists() and [r[0] for r in _held(e)] == ["file"]


def test_without_kubernetes_rules_the_import_writes_no_assignments(prometheus, tmp_path):
    d = tmp_path / "data"
    _inventory(d)
    out = _import(prometheus, d)
    assert out.exit_code == 0, out.output
    assert "pod labels" not in out.output and not (d / "assignments").exists()


def test_each_step_goes_to_the_series_that_began_last_and_a_pod_may_come_back(tmp_path):
    """A answers 0–9 s, B 5–14 s (A's lookback overlaps it), A again 16–20 s after a gap: ep-a
    until B's first step, ep-b until its last step + 1 s, nobody for 1 s, then ep-a again."""
    from collectors.inventory import load_inventory
    from collectors.prometheus import ImportResult, Series, assignment_rows

    _inventory(tmp_path, kubernetes=RULES)
    inv = load_inventory(tmp_path / "inventory.yaml")
    res = ImportResult(step_s=1.0)
    s = res.gpus[("infer-0", 0)] = Series("infer-0", 0)
    labels = ("pod", "namespace", "container")
    for pod, lo, hi in ((POD_A, 0, 9), (POD_B, 5, 14), (POD_A, 16, 20)):
        sid = res.series_id({"__name__": "DCGM_FI_DEV_POWER_USAGE", "pod": pod, "namespace": "serving"}, labels)
        t = np.arange(lo, hi + 1, dtype=np.int64) * 1000
        s.t_ms.append(t)
        s.power_avg_w.append(np.full(len(t), 100.0 + sid))
        s.power_sid.append(np.full(len(t), sid))
        s.hold_t_ms.append(t)
        s.hold_sid.append(np.full(len(t), sid))
    s.finish(1.0)
    rows, unmatched = assignment_rows(res, inv)
    sec = lambda r: (r["name"], r["from_ts"].timestamp(), r["to_ts"].timestamp())  # noqa: E731
    assert [sec(r) for r in rows] == [("ep-a", 0, 5), ("ep-b", 5, 15), ("ep-a", 16, 21)]
    assert rows[0]["host"] == "infer-0" and rows[0]["gpu"] == 0 and rows[0]["gpu_uuid"] is None  # no UUID label
    assert not unmatched
    # the power rows follow the same rule: B's values from 5 s, A's again from 16 s
    assert s.power_avg_w.tolist() == [100.0] * 5 + [101.0] * 10 + [100.0] * 5
