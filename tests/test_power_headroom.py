"""power_headroom on constructed clusters whose answer is arithmetic."""

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table, square_wave
from tests.days import builds_a_day

DATE = DAY.isoformat()
ASSETS = ["power_1s", "fleet_power_1s", "power_headroom"]


def _host(name, role, **extra):
    return {"name": name, "role": role, "gpus": [{"index": i, "tdp_w": 700} for i in range(2)], **extra}


@pytest.fixture(scope="module")
@builds_a_day
def headroom(tmp_path_factory):
    """c-flat (4200 W): two inference hosts at a constant 500 W → 1000 W, room for 6 more.
    c-train (5000 W): one training host, 200 ↔ 1400 W in 2 s halves → 2 more copies in step fit
    (3 × 1400 = 4200), a third would put half of the time at 5600 W."""
    data_dir = tmp_path_factory.mktemp("headroom") / "data"
    data_dir.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [
        {"name": "c-flat", "provisioned_w": 4200, "hosts": [_host("i0", "inference"), _host("i1", "inference")]},
        {"name": "c-train", "provisioned_w": 5000, "hosts": [_host("t0", "training", provisioned_w=1500)]},
    ]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    t = day_start_ns() + np.arange(3000, dtype=np.int64) * 100_000_000
    for host in ("i0", "i1"):
        for gpu in range(2):
            write_dataset(power_table(host, gpu, t, np.full(3000, 250.0)), data_dir, "power", prefix=f"{host}{gpu}")
    for gpu in range(2):
        write_dataset(power_table("t0", gpu, *square_wave(300, 4.0, 100.0, 700.0)), data_dir, "power", prefix=f"t{gpu}")
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("h", read_day(data_dir, "power_headroom", DATE))
    return con, outcome


def _row(con, entity):
    return con.execute("select provisioned_w, p99_2s_w, p999_2s_w, max_2s_w, headroom_pct, extra_hosts_estimate from h where entity=?", [entity]).fetchone()


def test_flat_cluster(headroom):
    con, _ = headroom
    assert _row(con, "c-flat") == (4200.0, 1000.0, 1000.0, 1000.0, pytest.approx(100 * 3200 / 4200), 6)


def test_synchronized_training_cluster(headroom):
    con, _ = headroom
    prov, p99, p999, mx, pct, extra = _row(con, "c-train")
    assert (prov, mx, extra) == (5000.0, 1400.0, 2)
    host = _row(con, "t0")
    assert host[3] == 1400.0 and host[4] == pytest.approx(100 * 100 / 1500) and host[5] is None


def test_checks_pass(headroom):
    _, outcome = headroom
    assert not [c for c in outcome.failed_checks if c.asset == "power_headroom"]
