"""Hosts whose GPUs' only source is dcgm-exporter's 1 s average (`POWER_USAGE` through Prometheus:
`power_avg_w`, `power_w` null, a row a second): the host, cluster, role and fleet rows read the
summed power at every window size. Host `flat`: 2 GPUs at a constant 300 W → 600 W. Host `wave`:
2 GPUs stepping 300 W ↔ 0 W every 2 s in step → a 600 W swing in every window long enough to hold
two samples; a window shorter than two sampling steps holds one change at most (it read ~0 W) and
is left out, as it is for the GPUs."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day
from tests.test_power_swings import assert_kernels_match_sql

ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "swing_stats", "power_summary"]
SECONDS = 600
UPPER = [("host", "flat"), ("host", "wave"), ("cluster", "c0"), ("role", "inference"), ("fleet", "f")]


def _dcgm(host: str, gpu: int, watts: np.ndarray) -> pa.Table:
    t = day_start_ns() + 3600 * 10**9 + np.arange(len(watts), dtype=np.int64) * 10**9
    table = power_table(host, gpu, t, watts, source="dcgm")
    table = table.set_column(table.schema.get_field_index("power_avg_w"), "power_avg_w", pa.array(watts.astype(np.float32)))
    return table.set_column(table.schema.get_field_index("power_w"), "power_w", pa.nulls(len(t), pa.float32()))


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("dcgm-hosts") / "data"
    d.mkdir()
    hosts = [{"name": h, "role": "inference", "gpus": [{"index": g, "tdp_w": 700.0} for g in (0, 1)]} for h in ("flat", "wave")]
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": hosts}]}]}), d / "inventory.yaml")
    wave = np.where((np.arange(SECONDS) // 2) % 2 == 0, 300.0, 0.0)
    for g in (0, 1):
        write_dataset(_dcgm("flat", g, np.full(SECONDS, 300.0)), d, "power", prefix=f"flat{g}")
        write_dataset(_dcgm("wave", g, wave), d, "power", prefix=f"wave{g}")
    outcome = run_day(d, DAY.isoformat(), selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    for t in ("swing_stats", "power_summary", "fleet_power_1s"):
        con.execute(f"create view {t} as select * from read_parquet('{d}/derived/{t}/**/*.parquet', union_by_name = true) "
                    "where level <> 'cluster_role'")
    return d, con


def _swings(con, level, entity):
    return dict(con.execute("select window_s, max_swing_w from swing_stats where level = ? and entity = ? and series = 'avg1s'",
                            [level, entity]).fetchall())


def test_a_constant_300_w_on_two_gpus_is_600_w_on_the_host_at_every_window(built):
    _, con = built
    summary = con.execute("select series, mean_w, max_w, p99_w from power_summary where level = 'host' and entity = 'flat'").fetchall()
    assert summary == [("avg1s", 600.0, 600.0, 600.0)]
    assert con.execute("select min(power_w), max(power_w), count(*) from fleet_power_1s "
                       "where level = 'host' and entity = 'flat'").fetchall() == [(600.0, 600.0, SECONDS)]
    assert _swings(con, "host", "flat") == {2: 0.0, 10: 0.0, 60: 0.0}


def test_a_host_of_1s_averages_swings_its_gpus_sum_in_every_window_it_reports(built):
    _, con = built
    for gpu in ("wave/0", "wave/1"):
        assert _swings(con, "gpu", gpu) == {2: 300.0, 10: 300.0, 60: 300.0}
    assert _swings(con, "host", "wave") == {2: 600.0, 10: 600.0, 60: 600.0}  # the 1 s window read 0 W
    for level, entity in UPPER:
        assert 1 not in _swings(con, level, entity), (level, entity)
        assert set(_swings(con, level, entity)) == {2, 10, 60}, (level, entity)


def test_kernel_rows_match_the_sql_definition(built):
    d, _ = built
    rows = assert_kernels_match_sql(d, DAY.isoformat())
    assert {(r[0], r[1]) for r in rows if r[0] != "gpu"} == set(UPPER)
