"""power_cap_whatif on a known-answer day (1 s levels of known power, phases and steps of known
length), α fitted from a two-limit fleet, and real data: the H200 capture 4's energy above 560 W."""

import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.power_caps import LimitObservation, fit_alpha, fleet_alpha, parse_alpha, parse_cap_factors
from pipeline.runner import run_day
from pipeline.tables import statements
from pipeline.warehouse import compute_connection, read_day
from tests.builders import DAY, day_start_ns, definition_query, power_table
from tests.days import builds_a_day

DATE = DAY.isoformat()
S = 1_000_000_000
T0 = day_start_ns()
ASSETS = ["power_1s", "energy_curve", "phase_intervals", "power_cap_whatif"]
SECONDS = 120
A100_ALPHA = (0.18, 0.16, 0.27)


def _ts(ns):
    return pa.array(np.asarray(ns, np.int64), pa.int64()).cast(pa.timestamp("ns", tz="UTC"))


def _levels(seconds: int, rng) -> np.ndarray:
    """A whole-watt level per second (float32-exact), from idle to above the limit."""
    return rng.integers(60, 430, seconds).astype(np.float64)


def _ten_hz(levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """10 samples per second at that second's level: each second's mean is its level exactly."""
    t = T0 + np.arange(len(levels) * 10, dtype=np.int64) * (S // 10)
    return t, np.repeat(levels, 10)


def _requests(rows):
    n = len(rows)
    return pa.table({
        "request_id": [f"r{i}" for i in range(n)], "endpoint": ["ep-a"] * n,
        "arrival_ts": _ts([T0 + int(a * S) for a, _, _ in rows]), "prefill_start_ts": _ts([T0 + int(a * S) for a, _, _ in rows]),
        "first_token_ts": _ts([T0 + int(f * S) for _, f, _ in rows]), "end_ts": _ts([T0 + int(e * S) for _, _, e in rows]),
        "prompt_tokens": pa.array([500] * n, pa.int32()), "output_tokens": pa.array([100] * n, pa.int32()), "status": ["ok"] * n,
    })


REQUESTS = [(10.5, 12.0, 20.0), (40.25, 41.75, 60.0)]  # (prefill start, first token, end) in s
STEPS = [(k * 5.0, k * 5.0 + 3.5) for k in range(SECONDS // 5)]  # 3.5 s steps every 5 s on job-a's host


@pytest.fixture(scope="module")
@builds_a_day
def known(tmp_path_factory):
    d = tmp_path_factory.mktemp("capwhatif") / "data"
    d.mkdir()
    inv = {"fleets": [{"name": "f", "clusters": [{"name": "c0", "provisioned_w": 3000, "hosts": [
        {"name": "inf-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 400, "model": "A100-SXM4-80GB"}],
         "endpoints": [{"name": "ep-a", "gpus": [0]}]},
        {"name": "trn-0", "role": "training", "power_limit_w": 350,
         "gpus": [{"index": i, "tdp_w": 400, "model": "A100-SXM4-80GB"} for i in range(2)],
         "jobs": [{"name": "job-a", "gpus": [0, 1]}]},
    ]}]}]}
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    rng = np.random.default_rng(7)
    levels = {("inf-0", 0): _levels(SECONDS, rng), ("trn-0", 0): _levels(SECONDS, rng), ("trn-0", 1): _levels(SECONDS, rng)}
    for (host, gpu), lv in levels.items():
        write_dataset(power_table(host, gpu, *_ten_hz(lv)), d, "power", prefix=f"{host}{gpu}")
    write_dataset(_requests(REQUESTS), d, "requests", prefix="r")
    n = len(STEPS)
    write_dataset(pa.table({
        "job": ["job-a"] * n, "host": ["trn-0"] * n, "step": pa.array(range(n), pa.int64()), "kind": ["step"] * n,
        "start_ts": _ts([T0 + int(a * S) for a, _ in STEPS]), "end_ts": _ts([T0 + int(b * S) for _, b in STEPS]),
        "tokens": pa.array([1000] * n, pa.int64()),
    }), d, "job_events", prefix="j")
    outcome = run_day(d, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", read_day(d, "power_cap_whatif", DATE))
    con.register("p1", read_day(d, "power_1s", DATE))
    return d, con, outcome, levels


def _row(con, level, entity, phase, factor):
    cur = con.execute("SELECT * FROM t WHERE level = ? AND entity = ? AND phase = ? AND cap_factor = ?", [level, entity, phase, factor])
    cols = [c[0] for c in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1, (level, entity, phase, factor, rows)
    return dict(zip(cols, rows[0], strict=True))


def _energies(con, host, gpu):
    """The observed energy per second (power_1s.energy_j): what the estimate keeps below the cap."""
    rows = con.execute("SELECT epoch(ts)::BIGINT - ?, energy_j FROM p1 WHERE host = ? AND gpu = ? ORDER BY ts", [T0 // S, host, gpu]).fetchall()
    return {int(s): e for s, e in rows}


def _overlap(a, b, sec):
    return max(0.0, min(b, sec + 1) - max(a, sec))


def _weights(phase, sec):
    """Phase weight of second ``sec`` of ep-a (its span: the GPU's first to last sample)."""
    pre = sum(_overlap(a, f, sec) for a, f, _ in REQUESTS)
    dec = sum(_overlap(f, e, sec) for _, f, e in REQUESTS)
    span = _overlap(0.0, SECONDS - 0.1, sec)
    return {"prefill": pre, "decode": dec, "idle": span - pre - dec, "unlabelled": 1 - span, "all": 1.0}[phase]


@pytest.mark.parametrize("factor", [1.0, 0.9, 0.8, 0.7, 0.6])
@pytest.mark.parametrize("phase", ["all", "prefill", "decode", "idle"])
def test_endpoint_energy_above_cap_and_estimate_are_the_formula(known, factor, phase):
    d, con, _, levels = known
    row = _row(con, "endpoint", "ep-a", phase, factor)
    cap = factor * 400
    lv, e = levels[("inf-0", 0)], _energies(con, "inf-0", 0)
    x = np.array([_weights(phase, s) for s in range(SECONDS)])
    energies = np.array([e[s] for s in range(SECONDS)])
    above = lv > cap
    assert row["cap_w"] == pytest.approx(cap)
    assert row["gpu_seconds"] == pytest.approx(x.sum(), rel=1e-9)
    assert row["energy_above_cap_j"] == pytest.approx((x * np.maximum(lv - cap, 0)).sum(), rel=1e-6, abs=1e-9)
    assert row["time_above_share"] == pytest.approx((x * above).sum() / x.sum(), rel=1e-9, abs=1e-12)
    assert row["energy_above_share"] == pytest.approx((x * energies * above).sum() / (x * energies).sum(), rel=1e-9, abs=1e-12)
    for suffix, alpha in zip(("", "_low", "_high"), A100_ALPHA, strict=True):
        stretched = above & (factor < 1)
        est_e = np.where(stretched, cap * (lv / cap) ** alpha, energies)
        est_t = np.where(stretched, (lv / cap) ** alpha, 1.0)
        assert row[f"est_energy{suffix}_j"] == pytest.approx((x * est_e).sum(), rel=1e-9)
        assert row[f"est_gpu_seconds{suffix}"] == pytest.approx((x * est_t).sum(), rel=1e-9)
    if factor == 1.0:  # the enforced limit: the observed day, overshoot included
        assert row["est_energy_j"] == pytest.approx(row["energy_j"], rel=1e-12)
        assert row["est_energy_change_pct"] == pytest.approx(0, abs=1e-9)
    assert (row["alpha"], row["alpha_low"], row["alpha_high"]) == A100_ALPHA
    assert row["alpha_source"].startswith("published: Samsi et al. 2023")


def test_a_second_split_between_phases_counts_in_each_by_overlap(known):
    _, con, _, _ = known
    total = sum(_row(con, "endpoint", "ep-a", p, 1.0)["gpu_seconds"] for p in ("prefill", "decode", "idle", "unlabelled"))
    assert total == pytest.approx(SECONDS)
    assert _row(con, "endpoint", "ep-a", "prefill", 1.0)["gpu_seconds"] == pytest.approx(1.5 + 1.5)
    assert _row(con, "endpoint", "ep-a", "decode", 1.0)["gpu_seconds"] == pytest.approx(8.0 + 18.25)


@pytest.mark.parametrize("factor", [1.0, 0.8, 0.6])
def test_job_steps_and_the_rest_under_the_hosts_limit(known, factor):
    _, con, _, levels = known
    cap = factor * 350  # the host's power_limit_w, not the TDP
    step_x = np.array([sum(_overlap(a, b, s) for a, b in STEPS) for s in range(SECONDS)])
    for phase, x in (("step", step_x), ("rest", 1 - step_x)):
        row = _row(con, "job", "job-a", phase, factor)
        want = sum((x * np.maximum(levels[("trn-0", g)] - cap, 0)).sum() for g in (0, 1))
        assert row["energy_above_cap_j"] == pytest.approx(want, rel=1e-6)
        assert row["gpu_seconds"] == pytest.approx(2 * x.sum())
        assert (row["gpus"], row["enforced_limit_w"]) == (2, 350.0)


def test_each_row_says_where_its_limit_came_from(known):
    """No GPU here reports a limit: the inference GPU's is its TDP, the training host's its inventory
    power_limit_w, and the cluster mixes both."""
    _, con, _, _ = known
    got = dict(con.execute("SELECT entity, any_value(limit_source) FROM t WHERE phase = 'all' GROUP BY ALL").fetchall())
    assert got == {"ep-a": "tdp", "job-a": "inventory", "inf-0": "tdp", "trn-0": "inventory", "c0": "inventory; tdp"}


def test_hosts_and_cluster_capped_power_and_hosts_that_fit(known):
    _, con, _, levels = known
    for factor in (1.0, 0.7):
        summed = sum(np.minimum(lv, factor * lim) if factor < 1 else lv
                     for (host, _), lv in levels.items() for lim in [400 if host == "inf-0" else 350])
        two_s = summed.reshape(-1, 2).mean(axis=1)
        row = _row(con, "cluster", "c0", "all", factor)
        assert row["max_2s_w"] == pytest.approx(two_s.max())
        assert row["p99_2s_w"] == pytest.approx(np.quantile(two_s, 0.99), rel=1e-6)
        host_cap = factor * (400 + 2 * 350) / 2  # the cluster's mean host: Σ caps of its GPUs
        assert row["extra_hosts_at_cap"] == math.floor((3000 - two_s.max()) / host_cap)
        assert row["provisioned_w"] == 3000


def test_checks_pass(known):
    _, _, outcome, _ = known
    assert not [c for c in outcome.failed_checks if c.asset == "power_cap_whatif"]


def test_configured_alpha_and_caps_replace_the_defaults(known):
    d, _, _, _ = known
    with compute_connection(d, DATE) as con:
        con.execute("SET VARIABLE cap_factors = ?", [parse_cap_factors("0.5")])
        con.execute("SET VARIABLE cap_alpha = ?", [parse_alpha("a100=0.5:0.4:0.9")])
        rows = con.execute(definition_query(con, "power_cap_whatif/power_cap_whatif")
                           + " ").fetchall()
        cols = [c[0] for c in con.description]
    got = [dict(zip(cols, r, strict=True)) for r in rows if r[cols.index("level")] == "endpoint" and r[cols.index("phase")] == "all"]
    assert sorted(r["cap_factor"] for r in got) == [0.5, 1.0]
    assert {(r["alpha"], r["alpha_low"], r["alpha_high"], r["alpha_source"]) for r in got} == {(0.5, 0.4, 0.9, "configured")}


@pytest.mark.parametrize("text, message", [("1.2", "outside (0, 1]"), ("x", "not a number"), ("", "no factor")])
def test_bad_cap_factors_say_why(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        parse_cap_factors(text)


@pytest.mark.parametrize("text, message", [("H100", "MODEL=alpha"), ("H100=a", "numbers"), ("H100=0.3:0.4:0.5", "low ≤ alpha")])
def test_bad_alpha_says_why(text, message):
    with pytest.raises(ValueError, match=message):
        parse_alpha(text)


def test_fit_alpha_needs_two_limits():
    assert fit_alpha([LimitObservation(700, 690, 1.0)]) is None
    assert fit_alpha([LimitObservation(700, 700, 1.0), LimitObservation(500, 500, 1.4 ** 0.3)]) == pytest.approx(0.3)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_alpha_fitted_from_a_two_limit_fleet(tmp_path):
    """Two jobs doing the same steps on H100s: at a 700 W limit a 4 s step draws 700 W; at 500 W the
    same step draws 500 W and lasts 4 × (700/500)^0.3 s. The fit recovers α = 0.3 within 10 %."""
    d = tmp_path / "data"
    d.mkdir()
    true_alpha = 0.3
    hosts = []
    for name, limit in (("h700", 700), ("h500", 500)):
        hosts.append({"name": name, "role": "training", "power_limit_w": limit,
                      "gpus": [{"index": i, "tdp_w": 700, "model": "H100 80GB HBM3"} for i in range(2)],
                      "jobs": [{"name": f"job-{limit}", "gpus": [0, 1], "model": "llama-8b"}]})
    dump_inventory(parse_inventory({"fleets": [{"name": "f", "clusters": [{"name": "c0", "hosts": hosts}]}]}), d / "inventory.yaml")
    for name, limit in (("h700", 700), ("h500", 500)):
        step_s = 4.0 * (700 / limit) ** true_alpha
        starts = np.arange(40) * (step_s + 1.0)
        t = np.arange(0, starts[-1] + step_s + 1.0, 0.02)
        in_step = ((t[:, None] >= starts) & (t[:, None] < starts + step_s)).any(axis=1)
        p = np.where(in_step, float(limit), 150.0)
        for gpu in range(2):
            write_dataset(power_table(name, gpu, T0 + np.round(t * S).astype(np.int64), p), d, "power", prefix=f"{name}{gpu}")
        write_dataset(pa.table({
            "job": [f"job-{limit}"] * 40, "host": [name] * 40, "step": pa.array(range(40), pa.int64()), "kind": ["step"] * 40,
            "start_ts": _ts(T0 + np.round(starts * S).astype(np.int64)), "end_ts": _ts(T0 + np.round((starts + step_s) * S).astype(np.int64)),
            "tokens": pa.array([4096] * 40, pa.int64()),
        }), d, "job_events", prefix=name)
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "training_energy"])
    assert outcome.success, outcome.error
    from pipeline.readonly import connect_readonly

    con = connect_readonly(d)
    try:
        fitted = fleet_alpha(con, [DATE], workload="llama-8b")
    finally:
        con.close()
    assert set(fitted) == {"H100 80GB HBM3"}
    assert fitted["H100 80GB HBM3"] == pytest.approx(true_alpha, rel=0.10)


def test_capture_4_energy_above_560_w_matches_the_buffer_samples(capture_4_day):
    """The real H200 (700 W limit): energy above 0.8 × 700 W from power_1s equals Σ max(P̄ − 560, 0)
    over the 1 s means of the driver's ~20 ms buffer samples, read straight from the raw files."""
    from tests.test_phases_event_time_real import _buffer

    d, date = capture_4_day.data_dir, capture_4_day.date
    assert set(ASSETS) <= capture_4_day.tables(), capture_4_day.outcome.materialized
    t, p = _buffer(d)
    sec = t // S
    sums = np.bincount(sec - sec[0], weights=p)
    counts = np.bincount(sec - sec[0])
    means = sums[counts > 0] / counts[counts > 0]
    want = np.maximum(means - 560.0, 0).sum()
    con = duckdb.connect()
    con.register("t", read_day(d, "power_cap_whatif", date))
    got, above_700, share = con.execute(
        "SELECT energy_above_cap_j, (SELECT energy_above_cap_j FROM t WHERE level = 'host' AND cap_factor = 1), time_above_share "
        "FROM t WHERE level = 'host' AND entity = 'h200-lab' AND cap_factor = 0.8").fetchone()
    assert want > 1000  # the capture spends real time above 560 W
    assert got == pytest.approx(want, rel=0.01)
    print(f"capture 4: energy above 560 W {got:.0f} J (reference {want:.0f} J), above 700 W {above_700:.0f} J, "
          f"time above 560 W {100 * share:.1f} %")
    prefill = con.execute("SELECT time_above_share FROM t WHERE level = 'endpoint' AND phase = 'prefill' AND cap_factor = 0.8").fetchone()
    assert prefill is not None and prefill[0] is not None


ORACLE = Path(__file__).parent / "oracles" / "power_cap_whatif_rows.sql"


@pytest.mark.parametrize("factors, change", [
    (None, None),
    ("0.5,0.95", None),
    (None, "UPDATE _cap_s SET e = NULL WHERE sec % 7 = 0"),  # seconds without energy, above a cap or not
    (None, "UPDATE _cap_s SET e = NULL WHERE host = 'inf-0'"),  # an endpoint with no energy at all
    ("0.6", "UPDATE _cap_s SET w = 2 * limit_w WHERE host = 'trn-0'"),  # every second above every cap
    (None, "UPDATE _cap_s SET e = NULL, w = 2 * limit_w WHERE host = 'trn-0'"),  # ... and none with energy
    (None, "UPDATE _cap_s SET w = 0.9 * limit_w + 0.25 WHERE sec % 3 = 0"),  # seconds less than 1 W above a cap
])
def test_rows_are_the_per_second_sums_to_the_last_digit(known, factors, change):
    """_cap_rows sums each GPU-second once whatever the cap and reads per cap only the seconds above
    it; its rows are exactly (DOUBLE equality) those of summing every second per cap
    (tests/oracles/power_cap_whatif_rows.sql), including seconds without energy, entities above
    every cap all day and seconds a fraction of a watt above a cap (the levels are whole watts)."""
    d, _, _, _ = known
    with compute_connection(d, DATE) as con:
        if factors:
            con.execute("SET VARIABLE cap_factors = ?", [parse_cap_factors(factors)])
        prepare, _ = statements("power_cap_whatif/power_cap_whatif")
        at = next(i for i, s in enumerate(prepare) if "TEMP TABLE _cap_rows AS" in s)
        for statement in prepare[:at]:
            con.execute(statement)
        if change:
            con.execute(change)
        con.execute(prepare[at])
        con.execute("CREATE TEMP TABLE _file_rows AS SELECT * FROM _cap_rows")
        con.execute(ORACLE.read_text())
        assert con.execute("SELECT count(*) FROM _cap_rows").fetchone()[0] > 0
        for a, b in (("_file_rows", "_cap_rows"), ("_cap_rows", "_file_rows")):
            extra = con.execute(f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}").fetchall()
            assert not extra, (a, extra[:3])
