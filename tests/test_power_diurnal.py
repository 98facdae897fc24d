"""diurnal_profile on a sine-modulated arrival rate (known peak hour) and a known power step."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import REQUESTS
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.tables import statements
from pipeline.warehouse import compute_connection, read_day
from tests.builders import DAY, day_start_ns, power_table, two_host_inventory
from tests.days import builds_a_day

DATE = DAY.isoformat()
ASSETS = ["power_1s", "fleet_power_1s", "hourly_activity", "diurnal_profile"]
PEAK_HOUR_UTC = 15


def _requests(rng) -> pa.Table:
    """Poisson arrivals over the day at λ(t) = 0.5 × (1 + 0.9 cos(2π (t − 15.5 h) / 24 h)) per second
    (thinning): the rate peaks in the middle of hour 15."""
    t = np.cumsum(rng.exponential(1 / 0.95, 120_000))
    t = t[t < 86400]
    keep = rng.random(len(t)) < (1 + 0.9 * np.cos(2 * np.pi * (t / 3600 - PEAK_HOUR_UTC - 0.5) / 24)) / 1.9
    t = t[keep]
    n = len(t)
    arrival = pa.array(day_start_ns() + (t * 1e9).astype(np.int64), pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    return pa.table({
        "request_id": [f"r{i}" for i in range(n)],
        "endpoint": ["ep-a"] * n,
        "arrival_ts": arrival,
        "prefill_start_ts": pa.nulls(n, pa.timestamp("ns", tz="UTC")),
        "first_token_ts": pa.nulls(n, pa.timestamp("ns", tz="UTC")),
        "end_ts": arrival,
        "prompt_tokens": pa.array(np.full(n, 1000), pa.int32()),
        "output_tokens": pa.array(np.full(n, 100), pa.int32()),
        "status": ["ok"] * n,
        "max_tokens": pa.nulls(n, pa.int32()),
        "replica": pa.nulls(n, pa.string()),
    }, schema=REQUESTS)


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    """ep-a (infer-0, 2 GPUs) draws power 15:00–16:00 only: 200 W per GPU for 30 min, then 400 W."""
    data_dir = tmp_path_factory.mktemp("diurnal") / "data"
    two_host_inventory(data_dir)
    reqs = _requests(np.random.default_rng(3))
    write_dataset(reqs, data_dir, "requests", prefix="reqs")
    t = day_start_ns() + PEAK_HOUR_UTC * 3600 * 10**9 + np.arange(36000, dtype=np.int64) * 100_000_000
    p = np.where(np.arange(36000) < 18000, 200.0, 400.0)
    for gpu in range(2):
        write_dataset(power_table("infer-0", gpu, t, p), data_dir, "power", prefix=f"i{gpu}")
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("d", read_day(data_dir, "diurnal_profile", DATE))
    return data_dir, con, reqs, outcome


def test_peak_hour_of_sine_arrivals(built):
    _, con, reqs, _ = built
    rates = dict(con.execute("select hour, requests_per_s from d where entity = 'ep-a' and dow is null").fetchall())
    # The fitted phase of the 24 h harmonic lands in the peak hour; the raw argmax (noisy between
    # neighbouring hours of a broad sine) within one hour of it.
    angle = np.angle(sum(r * np.exp(2j * np.pi * (h + 0.5) / 24) for h, r in rates.items()))
    assert (angle * 24 / (2 * np.pi)) % 24 == pytest.approx(PEAK_HOUR_UTC + 0.5, abs=0.25)
    assert abs(max(rates, key=rates.get) - PEAK_HOUR_UTC) <= 1
    assert abs(min(rates, key=rates.get) - (PEAK_HOUR_UTC + 12) % 24) <= 1
    assert sum(rates.values()) * 3600 == pytest.approx(reqs.num_rows)
    # The role row sums its endpoints.
    assert con.execute("select sum(requests_per_s) from d where entity = 'inference'").fetchone()[0] == pytest.approx(sum(rates.values()))


def test_power_and_energy_per_token(built):
    _, con, reqs, _ = built
    mean, p5, p95, out_tps, jpt, days, dow = con.execute(
        "select mean_w, p5_w, p95_w, output_tokens_per_s, j_per_output_token, days, dow from d where entity = 'ep-a' and hour = ?",
        [PEAK_HOUR_UTC],
    ).fetchone()
    assert mean == pytest.approx(600.0, rel=1e-3)  # two GPUs: 400 W then 800 W
    assert p5 == pytest.approx(400.0, abs=1.4) and p95 == pytest.approx(800.0, abs=1.4)  # bins of 1.4 W
    hours = (reqs.column("arrival_ts").cast(pa.int64()).to_numpy() - day_start_ns()) // (3600 * 10**9)
    hour_reqs = int((hours == PEAK_HOUR_UTC).sum())
    assert out_tps == pytest.approx(hour_reqs * 100 / 3600)
    energy = 2 * (200 * 1800 + 400 * 1799.9 + 0.1 * 300)  # trapezoid over the samples of both GPUs
    assert jpt == pytest.approx(energy / (hour_reqs * 100), rel=1e-4)
    assert (days, dow) == (1, None)


def test_time_zone_relabels_hours(built):
    data_dir, *_ = built
    with compute_connection(data_dir, DATE) as con:
        con.execute("SET VARIABLE diurnal_tz = 'Asia/Tokyo'")  # UTC+9, no daylight saving
        prepare, query = statements("diurnal_profile/diurnal_profile")
        rows = con.execute(f"select hour, mean_w from ({query}) where entity = 'ep-a' and mean_w is not null").fetchall()
    assert rows == [((PEAK_HOUR_UTC + 9) % 24, pytest.approx(600.0, rel=1e-3))]


def test_checks_pass(built):
    *_, outcome = built
    assert not [c for c in outcome.failed_checks if c.asset in ("hourly_activity", "diurnal_profile")]
