"""power_cap_whatif's candidate caps and α reachable from `wattline run` (--cap-factors, --cap-alpha)
and the settings (WATTLINE_CAP_FACTORS, WATTLINE_CAP_ALPHA), not only from Dagster run config; a
bad value is one `error:` line before anything runs."""

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from collectors.settings import CAP_ALPHA_ENV, CAP_FACTORS_ENV, load
from pipeline.assets.power_cap_whatif import POWER_CAP_WHATIF, CapConfig
from pipeline.power_caps import cap_variables
from pipeline.resources import WarehouseResource
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.cli_util import invoke, one_line_error

DATE = DAY.isoformat()
S = 1_000_000_000
SELECT = "power_1s,energy_curve,phase_intervals,power_cap_whatif"
UNSET = {CAP_FACTORS_ENV: None, CAP_ALPHA_ENV: None}  # CliRunner restores them after each call


def _day(d):
    """One A100 of 400 W TDP, a minute at whole-watt levels."""
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": [
        {"name": "inf-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 400, "model": "A100-SXM4-80GB"}]}]}]}]}
    d.mkdir(parents=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    t = day_start_ns() + np.arange(600, dtype=np.int64) * (S // 10)
    levels = np.random.default_rng(5).integers(60, 420, 60).astype(np.float64)
    write_dataset(power_table("inf-0", 0, t, np.repeat(levels, 10)), d, "power", prefix="g0")
    return d


def _caps(d) -> set[tuple]:
    con = duckdb.connect()
    con.register("t", read_day(d, "power_cap_whatif", DATE))
    return set(con.execute("SELECT cap_factor, alpha, alpha_low, alpha_high, alpha_source FROM t WHERE level = 'host'").fetchall())


@pytest.mark.slow  # runs the daily job (`wattline run`, ~10 s on a busy 2-core machine)
def test_run_flags_set_the_caps_and_alpha(tmp_path):
    d = _day(tmp_path / "data")
    result = invoke("run", "--date", DATE, "--select", SELECT, "--cap-factors", "0.5, 0.85",
                    "--cap-alpha", "a100=0.5:0.4:0.9", "--data-dir", str(d), env=UNSET)
    assert result.exit_code == 0, result.output
    assert _caps(d) == {(f, 0.5, 0.4, 0.9, "configured") for f in (1.0, 0.85, 0.5)}


@pytest.mark.slow  # runs the daily job (`wattline run`, ~10 s on a busy 2-core machine)
def test_settings_set_them_without_flags(tmp_path):
    d = _day(tmp_path / "data")
    result = invoke("run", "--date", DATE, "--select", SELECT, "--data-dir", str(d),
                    env={CAP_FACTORS_ENV: "0.75", CAP_ALPHA_ENV: "A100=0.3"})
    assert result.exit_code == 0, result.output
    assert _caps(d) == {(f, 0.3, 0.3, 0.3, "configured") for f in (1.0, 0.75)}


@pytest.mark.slow  # runs the daily job (`wattline run`, ~10 s on a busy 2-core machine)
def test_without_either_the_defaults_hold(tmp_path):
    d = _day(tmp_path / "data")
    assert invoke("run", "--date", DATE, "--select", SELECT, "--data-dir", str(d), env=UNSET).exit_code == 0
    got = _caps(d)
    assert {c[0] for c in got} == {1.0, 0.9, 0.8, 0.7, 0.6}
    assert {c[4] for c in got} == {"published: Samsi et al. 2023 (From Words to Watts), A100 250→175 W: −23 % energy, +6–7 % latency"}


@pytest.mark.parametrize(("args", "env", "fragments"), [
    (["--cap-factors", "1.5"], UNSET, ["cap_factors: 1.5 is outside (0, 1]"]),
    (["--cap-alpha", "H100"], UNSET, ["alpha: 'H100' is not MODEL=alpha"]),
    ([], {CAP_FACTORS_ENV: "x\x1b[2J", CAP_ALPHA_ENV: None}, ["cap_factors: 'x\\x1b[2J' is not a number", CAP_FACTORS_ENV]),
])
def test_a_bad_value_is_one_error_line(tmp_path, args, env, fragments):
    d = _day(tmp_path / "data")
    result = invoke("run", "--date", DATE, "--select", SELECT, *args, "--data-dir", str(d), env=env)
    one_line_error(result, *fragments)
    assert not (d / "derived").exists()  # said before anything ran


def test_dagster_run_config_comes_first(monkeypatch, tmp_path):
    monkeypatch.setenv(CAP_FACTORS_ENV, "0.5")
    monkeypatch.setenv(CAP_ALPHA_ENV, "H100=0.3")
    resource = WarehouseResource.from_settings(load(), tmp_path)  # the settings resolved where a run starts
    config = CapConfig(cap_factors="0.9", alpha="")
    assert POWER_CAP_WHATIF.variables(config, resource) == {"cap_factors": "0.9", "cap_alpha": "H100=0.3:0.3:0.3"}
    assert POWER_CAP_WHATIF.variables(CapConfig(), resource) == {"cap_factors": "0.5", "cap_alpha": "H100=0.3:0.3:0.3"}
    assert cap_variables() == {"cap_factors": "1.0,0.9,0.8,0.7,0.6", "cap_alpha": ""}  # the defaults: no setting read below the entry
