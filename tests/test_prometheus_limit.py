"""`wattline import prometheus --limit-metric`: the enforced power limit dcgm-exporter exports
(``DCGM_FI_DEV_POWER_MGMT_LIMIT``, opt-in there) lands in ``power_limit_w``, read from a real
Prometheus server scraping a local exporter."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.prometheus import LIMIT_METRIC, ImportResult, Series, import_prometheus, to_table
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.cli_util import invoke
from tests.days import slow_setup
from tests.test_prometheus_import import COUNT, HOST, LABELS, Exporter, inventory, running_prometheus, stored

CHANGE_AT = 80  # GPU 0's limit goes 700 → 500 W here
GPU1_FROM = 20  # GPU 1's limit series starts here: its earlier rows have no limit
BAD = range(100, 110)  # GPU 1 exports an impossible limit here: dropped, the last good one carried forward


class LimitExporter(Exporter):
    """The recorded series plus the power-limit gauge dcgm-exporter exports when the field is enabled."""

    def body(self) -> bytes:
        k = min(self.k, COUNT - 1)  # Prometheus scrapes one target at a time: the k super().body() serves
        lines = [super().body().decode().rstrip("\n"),
                 "# HELP DCGM_FI_DEV_POWER_MGMT_LIMIT Current power limit (in W).",
                 "# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge"]
        t = self.base_ms + k * 1000
        limits = [(0, 700.0 if k < CHANGE_AT else 500.0)]
        if k >= GPU1_FROM:
            limits.append((1, 9999.0 if k in BAD else 600.0))
        for g, w in limits:
            lines.append(f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{gpu=\"{g}\",{LABELS.format(g=g, host=HOST)}}} {w:.3f} {t}")
        lines.append(f'DCGM_FI_DEV_POWER_MGMT_LIMIT{{gpu="5",Hostname="{HOST}"}} 700 {t}')  # no power series
        return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
@slow_setup  # a real Prometheus that scrapes its series in real time (~12 s)
def prometheus(tmp_path_factory):
    with running_prometheus(tmp_path_factory.mktemp("prom"), LimitExporter) as got:
        yield got


def limits(table: pa.Table, gpu: int) -> list:
    return table.filter(pa.compute.equal(table["gpu"], gpu))["power_limit_w"].to_pylist()


def test_imported_rows_carry_the_enforced_limit(prometheus, tmp_path):
    url, base_s, _ = prometheus
    data = tmp_path / "data"
    inventory(data)
    res = import_prometheus(url, base_s, base_s + COUNT - 1, data, step_s=1.0, max_points=40, progress=False,
                            limit_metric=LIMIT_METRIC)
    assert res.chunks == 4 and res.rows == 2 * COUNT  # the limit queried in the same chunks as the power
    table = stored(data)
    assert limits(table, 0) == [700.0] * CHANGE_AT + [500.0] * (COUNT - CHANGE_AT)
    assert limits(table, 1) == [None] * GPU1_FROM + [600.0] * (COUNT - GPU1_FROM)
    assert res.skipped == {"power limit outside 0..5000 W": len(BAD), "limit series without a power series": 4}
    assert "power limit on 2 GPU(s): 500, 600, 700 W" in res.summary()
    # without the flag nothing is asked and the column stays null; re-importing replaces the files
    res = import_prometheus(url, base_s, base_s + COUNT - 1, data, step_s=1.0, progress=False)
    table = stored(data)
    assert table.num_rows == 2 * COUNT and table["power_limit_w"].null_count == 2 * COUNT
    assert "power limit" not in res.summary()


def test_cli_limit_metric_flag(prometheus, tmp_path):
    url, base_s, _ = prometheus
    span = ["--url", url, "--start", str(base_s), "--end", str(base_s + COUNT - 1)]
    result = invoke("import", "prometheus", *span, "--limit-metric", LIMIT_METRIC, "--data-dir", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert "power limit on 2 GPU(s): 500, 600, 700 W" in result.output
    assert limits(stored(tmp_path / "a"), 0)[CHANGE_AT - 1:CHANGE_AT + 1] == [700.0, 500.0]
    # a limit metric the exporter does not export: the power rows still land, and the summary says why it is null
    missing = invoke("import", "prometheus", *span, "--limit-metric", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
                     "--data-dir", str(tmp_path / "b"))
    assert missing.exit_code == 0, missing.output
    assert "no DCGM_FI_DEV_ENFORCED_POWER_LIMIT values" in missing.output
    assert stored(tmp_path / "b")["power_limit_w"].null_count == 2 * COUNT


def test_limit_is_carried_forward_never_back():
    """A limit sampled less often than the power (or with points dropped) holds until the next value."""
    s = Series(HOST, 0)
    s.t_ms, s.power_avg_w = np.arange(0, 10_000, 1000), np.full(10, 300.0)
    s.energy_t_ms, s.energy_mj = np.empty(0, np.int64), np.empty(0)
    s.limit_t_ms, s.limit_w = np.array([2500, 6000]), np.array([700.0, 450.0])
    table = to_table(ImportResult(gpus={(HOST, 0): s}))
    assert table["power_limit_w"].to_pylist() == [None] * 3 + [700.0] * 3 + [450.0] * 4


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_limit_change_shows_in_energy_per_token(prometheus, tmp_path):
    """700 → 500 W mid-range: energy_per_token's power_limit buckets follow the imported limit, not TDP."""
    url, base_s, _ = prometheus
    data = tmp_path / "data"
    data.mkdir()
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{
        "name": HOST, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700, "model": "H200"}],
        "endpoints": [{"name": "chat", "gpus": [0]}]}]}]}]}), data / "inventory.yaml")
    import_prometheus(url, base_s, base_s + COUNT - 1, data, step_s=1.0, progress=False, limit_metric=LIMIT_METRIC)
    days = sorted({dt.datetime.fromtimestamp(base_s + k, dt.UTC).date().isoformat() for k in (0, COUNT - 1)})
    buckets: dict[str, set] = {}
    for day in days:
        outcome = run_day(data, day, selection=["power_1s", "energy_curve", "power_100ms", "phase_timeline",
                                                "phase_intervals", "phase_segments", "request_energy",
                                                "energy_per_token"])
        assert outcome.success, outcome.error
        rows = read_day(data, "energy_per_token", day).to_pylist()
        for r in rows:
            if r["endpoint"] == "chat" and r["bucket_kind"] == "power_limit":
                buckets.setdefault(r["bucket"], set()).add(r["power_limit_source"])
    assert {"700 W", "500 W"} <= set(buckets) and set(buckets) <= {"700 W", "600 W", "500 W"}  # 600: a mixed minute
    assert set().union(*buckets.values()) == {"power"}
