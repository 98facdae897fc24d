"""`wattline import prometheus` against a real Prometheus server (Debian's `prometheus` package)
scraping a local exporter that serves a recorded H200 series in dcgm-exporter's text format."""

from __future__ import annotations

import csv
import datetime as dt
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
import yaml

from collectors.inventory import dump_inventory, parse_inventory
from collectors.prometheus import PrometheusError, chunks, import_prometheus
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.cli_util import invoke, one_line_error
from tests.days import slow_setup
from tests.prometheus_harness import PROMETHEUS, ScrapedExporter, free_port
from tests.prometheus_harness import running_prometheus as scraping
from tests.test_power_swings import assert_kernels_match_sql

RECORDED = Path(__file__).parent / "data" / "dcgm" / "h200_1s.csv"
FIRST, COUNT = 150, 150  # seconds 150..299 of the capture: the end of inference, idle, then training
HOST = "h200-lab"
LABELS = ('UUID="GPU-c002ef2a-2a3c-e0e9-4d8a-a58bfd6b0084",pci_bus_id="00000000:19:00.0",device="nvidia{g}",'
          'modelName="NVIDIA H200",Hostname="{host}",DCGM_FI_DRIVER_VERSION="580.159.04"')
RESET_AT = 70  # GPU 1's energy counter restarts from 0 here (a driver reload)

if not os.path.exists(PROMETHEUS):
    if os.environ.get("CI"):
        pytest.fail(f"{PROMETHEUS} is missing (apt-get install -y prometheus); CI must run this test", pytrace=False)
    pytestmark = pytest.mark.skip(reason=f"{PROMETHEUS} is missing: apt-get install -y prometheus")


def recorded() -> tuple[np.ndarray, np.ndarray]:
    """(power W, energy mJ) of the slice: GPU 0 as recorded."""
    with open(RECORDED) as fh:
        rows = list(csv.DictReader(fh))[FIRST:FIRST + COUNT]
    return (np.array([int(r["power_usage_mw"]) / 1000 for r in rows]),
            np.array([int(r["total_energy_mj"]) for r in rows], dtype=np.float64))


class Exporter(ScrapedExporter):
    """dcgm-exporter's /metrics, one recorded second per scrape, each sample with its own timestamp
    (base + k s), so a fast scrape records the whole series in a few seconds of wall time.
    GPU 1 is GPU 0 at 60 % with an energy counter that resets at RESET_AT."""

    def __init__(self, base_ms: int) -> None:
        self.base_ms = base_ms
        self.power, self.energy = recorded()
        e1 = self.energy * 0.6
        self.energy1 = np.concatenate([e1[:RESET_AT] - e1[0] + 5e6, e1[RESET_AT:] - e1[RESET_AT] + 1000.0])
        self.k = 0
        self.lock = threading.Lock()

    def body(self) -> bytes:
        with self.lock:
            k = min(self.k, COUNT - 1)
            self.k += 1
        t = self.base_ms + k * 1000
        lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
        for g, p in ((0, self.power[k]), (1, self.power[k] * 0.6)):
            lines.append(f"DCGM_FI_DEV_POWER_USAGE{{gpu=\"{g}\",{LABELS.format(g=g, host=HOST)}}} {p:.6f} {t}")
        lines += ["# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
                  "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"]
        for g, e in ((0, self.energy[k]), (1, self.energy1[k])):
            lines.append(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"{g}\",{LABELS.format(g=g, host=HOST)}}} {e:.0f} {t}")
        lines.append(f'BAD_HOST_POWER{{gpu="0",Hostname="../etc"}} 100 {t}')  # a host name that is no path
        return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
@slow_setup  # a real Prometheus that scrapes its series in real time (~12 s)
def prometheus(tmp_path_factory):
    """A real Prometheus on 127.0.0.1 that has scraped the whole recorded series; yields (url, base_s, exporter)."""
    with running_prometheus(tmp_path_factory.mktemp("prom"), Exporter) as got:
        yield got


@contextmanager
def running_prometheus(tmp: Path, exporter_class):
    """Prometheus scraping ``exporter_class(base_ms)`` until it served the whole series; (url, base_s, exporter)."""
    now_s = int(time.time())
    base_s = now_s - COUNT - 30  # the series ends in the past, as a finished day does
    exporter = exporter_class(base_s * 1000)
    with scraping(tmp, exporter, COUNT) as url:
        yield url, base_s, exporter


def inventory(data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{
        "name": HOST, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}, {"index": 1, "tdp_w": 700}]}]}]}]}),
        data / "inventory.yaml")


def stored(data: Path) -> pa.Table:
    files = sorted((data / "power").glob("date=*/host=*/*.parquet"))
    table = pads.dataset(files, format="parquet").to_table().sort_by([("gpu", "ascending"), ("ts", "ascending")])
    return table


def test_chunks_cover_the_grid_within_the_point_limit():
    got = list(chunks(0.0, 100.0, 1.0, max_points=11))
    assert got[0] == (0.0, 10.0) and got[1] == (11.0, 21.0) and got[-1] == (99.0, 100.0)
    points = [round((b - a) / 1.0) + 1 for a, b in got]
    assert max(points) <= 11 and sum(points) == 101


@pytest.mark.slow  # runs the daily job on a day of its own
def test_imported_day_equals_the_recorded_series(prometheus, tmp_path):
    url, base_s, exporter = prometheus
    data = tmp_path / "data"
    inventory(data)
    # a small point limit: the range is fetched in 4 chunks, as a long range would be at 11,000
    res = import_prometheus(url, base_s, base_s + COUNT - 1, data, step_s=1.0, max_points=40, progress=False)
    assert res.chunks == 4 and res.rows == 2 * COUNT
    table = stored(data)
    power, energy = recorded()
    for g, scale in ((0, 1.0), (1, 0.6)):
        rows = table.filter(pa.compute.equal(table["gpu"], g))
        t_ns = rows["ts"].cast(pa.int64()).to_numpy() * (1000 if rows["ts"].type.unit == "us" else 1)
        assert (t_ns == (base_s + np.arange(COUNT)) * 10**9).all()  # the scrape points
        np.testing.assert_array_equal(rows["power_avg_w"].to_numpy(), (power * scale).astype(np.float32))
        assert rows["power_w"].null_count == COUNT
        assert set(rows["source"].to_pylist()) == {"dcgm"}
        assert set(rows["gpu_uuid"].to_pylist()) == {"GPU-c002ef2a-2a3c-e0e9-4d8a-a58bfd6b0084"}
    e0 = table.filter(pa.compute.equal(table["gpu"], 0))["energy_j"].to_numpy()
    np.testing.assert_allclose(e0, energy / 1000.0)
    # energy per GPU: the counter (a reset skipped on GPU 1) against the recorded power's integral
    integral = float(np.sum((power[1:] + power[:-1]) / 2))  # trapezoid, 1 s apart
    assert res.resets == 1
    assert res.scrape_interval_s == pytest.approx(1.0, rel=0.02) and res.coarse_warning() is None
    assert res.energy_j((HOST, 0)) == pytest.approx((energy[-1] - energy[0]) / 1000)
    assert res.energy_j((HOST, 0)) == pytest.approx(integral, rel=0.01)
    e1 = exporter.energy1
    assert res.energy_j((HOST, 1)) == pytest.approx((e1[RESET_AT - 1] - e1[0] + e1[-1] - e1[RESET_AT]) / 1000)
    # `wattline run`: power_1s integrates the imported 1 s averages to the same energy
    days = sorted({dt.datetime.fromtimestamp(base_s + k, dt.UTC).date().isoformat() for k in (0, COUNT - 1)})
    total = {0: 0.0, 1: 0.0}
    swings = []
    for day in days:
        outcome = run_day(data, day, selection=["power_1s", "fleet_power_1s", "power_100ms", "fleet_power_100ms",
                                                "swing_stats"])
        assert outcome.success, outcome.error
        assert_kernels_match_sql(data, day)  # the dcgm rule (no window under two steps) in the kernel as in the SQL
        swings += read_day(data, "swing_stats", day).select(["level", "window_s", "series"]).to_pylist()
        p1s = read_day(data, "power_1s", day).select(["gpu", "energy_j", "source", "is_average"]).to_pylist()
        assert {r["source"] for r in p1s} == {"dcgm"} and all(r["is_average"] for r in p1s)
        for r in p1s:
            total[r["gpu"]] += r["energy_j"]
    assert total[0] == pytest.approx(integral, rel=0.01)
    # no instantaneous series from 1 s averages, and no swing over a window shorter than two steps
    gpu_swings = {(r["window_s"], r["series"]) for r in swings if r["level"] == "gpu"}
    assert gpu_swings == {(2, "avg1s"), (10, "avg1s"), (60, "avg1s")}
    assert total[1] == pytest.approx(0.6 * integral, rel=0.01)
    # importing the same range again replaces its files: no second copy of a row
    import_prometheus(url, base_s, base_s + COUNT - 1, data, step_s=1.0, max_points=40, progress=False)
    assert stored(data).num_rows == 2 * COUNT


def test_cli_import_and_stub_inventory(prometheus, tmp_path):
    url, base_s, _ = prometheus
    data = tmp_path / "data"
    start = dt.datetime.fromtimestamp(base_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = invoke("import", "prometheus", "--url", url, "--start", start, "--end", str(base_s + COUNT - 1),
                    "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    assert f"imported {2 * COUNT} power row(s) (source dcgm) for 2 GPU(s) on 1 host(s) (h200-lab)" in result.output
    assert "1 counter reset(s) skipped" in result.output and "scrape interval ≈ 0.99" in result.output
    coarse = invoke("import", "prometheus", "--url", url, "--start", start, "--end", str(base_s + COUNT - 1),
                    "--step", "250ms", "--data-dir", str(tmp_path / "fine"))
    assert coarse.exit_code == 0 and "warning: Prometheus scraped every ≈ 0.99" in coarse.output
    stub = invoke("import", "prometheus", "--url", url, "--start", start, "--end", str(base_s + COUNT - 1),
                  "--print-inventory", "--data-dir", str(tmp_path / "none"))
    assert stub.exit_code == 0, stub.output
    inv = parse_inventory(yaml.safe_load(stub.output))
    hosts = [h for _, _, h in inv.iter_hosts()]
    assert [(h.name, [(g.index, g.tdp_w, g.model) for g in h.gpus]) for h in hosts] == [
        (HOST, [(0, 700, "NVIDIA H200"), (1, 700, "NVIDIA H200")])]
    assert not (tmp_path / "none" / "power").exists()


def test_bad_input_is_one_line_and_writes_nothing(prometheus, tmp_path):
    url, base_s, _ = prometheus
    data = tmp_path / "data"
    span = ["--start", str(base_s), "--end", str(base_s + COUNT - 1), "--data-dir", str(data)]
    one_line_error(invoke("import", "prometheus", "--url", url, "--metric", "DCGM_FI_DEV_POWER_USAGE_TYPO", *span),
                   "no DCGM_FI_DEV_POWER_USAGE_TYPO series")
    one_line_error(invoke("import", "prometheus", "--url", f"http://127.0.0.1:{free_port()}", *span),
                   "cannot reach Prometheus")
    one_line_error(invoke("import", "prometheus", "--url", url, "--host-label", "node", *span),
                   "no label 'node'", "Hostname")
    one_line_error(invoke("import", "prometheus", "--url", url, "--metric", "DCGM_FI_DEV_POWER_USAGE{", *span),
                   "bad_data")
    one_line_error(invoke("import", "prometheus", "--url", url, "--start", "yesterday", "--end", "1",
                          "--data-dir", str(data)), "--start")
    assert not (data / "power").exists()


def test_a_host_name_that_cannot_be_a_path_is_refused(prometheus, tmp_path):
    """The host label becomes power/date=D/host=H/: checked before anything is written."""
    url, base_s, _ = prometheus
    with pytest.raises(PrometheusError, match="label Hostname: name '../etc'"):
        import_prometheus(url, base_s, base_s + COUNT - 1, tmp_path, metric="BAD_HOST_POWER", energy_metric=None,
                          progress=False)
    assert not (tmp_path / "power").exists()
