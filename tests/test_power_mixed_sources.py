"""A host whose GPUs mix an instantaneous source (NVML, 10 Hz) and a 1 s-average one (DCGM's
POWER_USAGE, 1 Hz) has no complete instantaneous slot and no complete 1 s-average slot; its
host, cluster, role and fleet rows of power_summary come from each GPU's best value (instantaneous
where it has one, else its 1 s average), marked 'mixed'."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.days import builds_a_day
from tests.test_power_swings import assert_kernels_match_sql

START_NS = day_start_ns() + 10 * 3600 * 10**9
ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "power_summary", "swing_stats"]


def _average_only(table: pa.Table) -> pa.Table:
    """The same rows as a 1 s-average source: power_w null, the value in power_avg_w."""
    avg = table.column("power_w").cast(table.schema.field("power_avg_w").type)
    table = table.set_column(table.schema.get_field_index("power_avg_w"), "power_avg_w", avg)
    return table.set_column(table.schema.get_field_index("power_w"), "power_w", pa.nulls(len(table), table.schema.field("power_w").type))


@pytest.fixture(scope="module")
@builds_a_day
def summary(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed") / "data"
    d.mkdir()
    host = {"name": "mix-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0}, {"index": 1, "tdp_w": 700.0}]}
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [host]}]}]}), d / "inventory.yaml")
    seconds = 600
    t0 = START_NS + np.arange(seconds * 10, dtype=np.int64) * 100_000_000
    write_dataset(power_table("mix-0", 0, t0, np.full(len(t0), 300.0), source="nvml-field"), d, "power", prefix="g0")
    t1 = START_NS + np.arange(seconds, dtype=np.int64) * 1_000_000_000
    write_dataset(_average_only(power_table("mix-0", 1, t1, np.full(len(t1), 200.0), source="dcgm")), d, "power", prefix="g1")
    out = run_day(d, DAY.isoformat(), selection=ASSETS)
    assert out.success, out.error
    con = duckdb.connect()
    con.register("ps", read_day(d, "power_summary", DAY.isoformat()))
    con.register("ss", read_day(d, "swing_stats", DAY.isoformat()))
    rows = {(lv, e): (s, m, x) for lv, e, s, m, x in con.execute(
        "SELECT level, entity, series, mean_w, max_w FROM ps WHERE level <> 'cluster_role'").fetchall()}
    swings = {(lv, e, s, w): (mx, n) for lv, e, s, w, mx, n in con.execute(
        "SELECT level, entity, series, window_s, max_swing_w, windows_complete FROM ss WHERE level <> 'cluster_role'").fetchall()}
    return d, rows, swings


def test_an_entity_mixing_instant_and_1s_average_sources_has_mixed_rows(summary):
    _, summary, _ = summary
    for key in (("host", "mix-0"), ("cluster", "c"), ("role", "inference"), ("fleet", "f")):
        assert key in summary, (key, sorted(summary))
        series, mean_w, max_w = summary[key]
        assert series == "mixed" and mean_w == pytest.approx(500.0) and max_w == pytest.approx(500.0), (key, summary[key])
    assert summary[("gpu", "mix-0/0")][0] == "instant" and summary[("gpu", "mix-0/1")][0] == "avg1s"


def test_its_swing_stats_rows_are_mixed_and_match_the_sql_definition(summary):
    """Constant 300 W + 200 W: every complete 2 s window of the mixed sum swings 0 W; of the 300
    aligned 2 s windows of the 600 s, 299 are complete (the DCGM GPU's last value, with no later
    sample to bound the gap, is carried one slot only, so the last window misses slots)."""
    d, _, swings = summary
    for level, entity in (("host", "mix-0"), ("cluster", "c"), ("role", "inference"), ("fleet", "f")):
        assert (level, entity, "instant", 2) not in swings and (level, entity, "avg1s", 2) not in swings
        max_w, windows = swings[(level, entity, "mixed", 2)]
        assert max_w == 0.0 and windows == 299, (level, max_w, windows)
    rows = assert_kernels_match_sql(d, DAY.isoformat())
    assert {(r[0], r[3]) for r in rows if r[1] == "mix-0"} == {("host", "mixed")}
