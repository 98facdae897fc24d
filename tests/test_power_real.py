"""Plausibility on real nvidia-smi traces (tests/data/nvidia-smi, see SOURCE.md there): an A100
whose power.draw is instantaneous and an H100 whose power.draw is a 1 s average, both at ~250 ms.
Converted here with a few lines of polars, independently of the nvidia-smi importer."""

from pathlib import Path

import duckdb
import polars as pl
import pytest

from collectors.contract import POWER
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from tests.days import builds_a_day

HERE = Path(__file__).parent / "data" / "nvidia-smi"
ASSETS = ["power_1s", "fleet_power_1s", "power_100ms", "fleet_power_100ms", "swing_stats", "power_summary"]
# host, file, TDP, whether power.draw is instantaneous (A100) or a 1 s average (H100), and whole
# hours to shift it by so both land on one UTC day (one pipeline run; no check here depends on the hour)
TRACES = [("a100", "a100-burstgpt.csv", 400, True, 0), ("h100", "h100-qwen3-8b.csv", 700, False, -2)]


def _to_contract(path: Path, host: str, instant: bool, shift_h: int):
    """nvidia-smi CSV (local wall time, UTC−7) → the power contract."""
    df = pl.read_csv(path).rename(lambda c: c.strip())
    ts = pl.col("timestamp").str.strptime(pl.Datetime("ns"), "%Y/%m/%d %H:%M:%S%.f").dt.offset_by(f"{7 + shift_h}h").dt.replace_time_zone("UTC")
    draw = pl.col("power.draw [W]").cast(pl.Float32)
    out = df.select(
        ts.alias("ts"),
        pl.lit(host).alias("host"),
        pl.col("index").cast(pl.UInt8).alias("gpu"),
        pl.col("uuid").alias("gpu_uuid"),
        (draw if instant else pl.lit(None, pl.Float32)).alias("power_w"),
        (pl.lit(None, pl.Float32) if instant else draw).alias("power_avg_w"),
        pl.lit("nvidia-smi" if instant else "nvidia-smi-average").alias("source"),
    )
    table = out.to_arrow()
    for field in POWER:
        if field.name not in table.column_names:
            table = table.append_column(field.name, pl.Series([None] * len(out)).cast(pl.Null).to_arrow().cast(field.type))
    return table.select(POWER.names).cast(POWER), str(out["ts"][0].date())


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("real") / "data"
    data_dir.mkdir()
    hosts = [{"name": h, "role": "inference", "gpus": [{"index": 0, "tdp_w": tdp}], "endpoints": [{"name": f"vllm-{h}", "gpus": [0]}]}
             for h, _, tdp, _, _ in TRACES]
    dump_inventory(parse_inventory({"fleets": [{"name": "lab", "clusters": [{"name": "bench", "hosts": hosts}]}]}), data_dir / "inventory.yaml")
    dates = set()
    for host, name, _, instant, shift_h in TRACES:
        table, date = _to_contract(HERE / name, host, instant, shift_h)
        write_dataset(table, data_dir, "power", prefix=host)
        dates.add(date)
    assert len(dates) == 1
    outcome = run_day(data_dir, dates.pop(), selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    for host, *_ in TRACES:
        for t in ("swing_stats", "power_summary"):
            con.execute(f"create table {host}_{t} as select * from read_parquet('{data_dir}/derived/{t}/**/*.parquet') "
                        f"where level = 'gpu' and entity like '{host}/%'")
    return con


def test_a100_prefill_spikes_swing_the_gpu(built):
    mx, pct, ramp, n = built.execute(
        "select max_swing_w, max_swing_pct, max_ramp_w_per_s, windows_complete from a100_swing_stats "
        "where level = 'gpu' and window_s = 2 and series = 'instant'"
    ).fetchone()
    # Idle ≈ 85 W, prefill spikes ≈ 500 W within 250 ms: a 2 s window sees most of that.
    assert 300 < mx < 520 and 75 < pct < 130 and n > 40
    assert ramp > 1000  # hundreds of W within one 100 ms step of the grid
    mean, mx_w, above, pta = built.execute("select mean_w, max_w, above_tdp_share, peak_to_avg from a100_power_summary where level = 'gpu'").fetchone()
    assert 85 < mean < 400 and 400 < mx_w < 600 and 0 < above < 0.2 and pta > 1.3


def test_h100_average_is_not_taken_for_instantaneous(built):
    rows = dict(built.execute(
        "select series, max_swing_w from h100_swing_stats where level = 'gpu' and window_s = 2"
    ).fetchall())
    # Its only source is the driver's 1 s average: no instantaneous series, an avg1s one.
    assert rows.get("instant") is None and rows["avg1s"] > 0
    mean, = built.execute("select mean_w from h100_power_summary where level = 'gpu'").fetchone()
    assert 120 < mean < 700
