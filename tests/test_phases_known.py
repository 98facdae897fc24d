"""Phase tables on a constructed endpoint: exact boundaries, energies and J/token.

The 100 ms phase_timeline keeps its grid labels (any overlap); phase_segments (source requests),
request_energy and energy_per_token work in event time on the energy curve and are checked against
the independent reference of tests/phase_reference.py (piecewise-linear power between the samples)."""

import duckdb
import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.phase_fixtures import P_DEC, P_DEC2, P_IDLE, P_PRE, REQUESTS_S, SECONDS, T0, endpoint_inventory, requests_table, slot_labels, write_known_endpoint
from tests.phase_reference import Request, attribute, interval_energy_j

DATE = DAY.isoformat()
# What the tests read and the checks they name: the phase chain, not the day's other tables.
ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments", "request_energy", "energy_per_token"]


def table(data_dir, name):
    return read_day(data_dir, name, DATE)


@pytest.fixture(scope="module")
@builds_a_day
def built(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("known") / "data"
    power = write_known_endpoint(data_dir)
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    assert {key.rsplit("/", 1)[-1] for key in outcome.materialized} >= set(ASSETS), outcome.materialized  # their checks ran
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in ("phase_timeline", "phase_segments", "request_energy", "energy_per_token"):
        con.register(name, table(data_dir, name))
    return con, outcome, power


def test_timeline_counts_and_labels(built):
    con, _, _ = built
    rows = con.execute(
        """SELECT (epoch_ms(ts) % 86400000) / 100 AS slot, n_prefill, n_decode, phase, prefill_estimated
           FROM phase_timeline WHERE gpu = 0 ORDER BY ts"""
    ).fetchall()
    assert len(rows) == 600
    by_slot = {r[0]: r[1:] for r in rows}
    assert by_slot[99] == (0, 0, "idle", False)
    assert by_slot[100] == (1, 0, "prefill", False)
    assert by_slot[105] == (0, 1, "decode", False)
    assert by_slot[120] == (1, 1, "prefill", False)  # B's prefill while A decodes
    assert by_slot[125] == (0, 2, "decode", False)
    assert by_slot[145] == (0, 0, "idle", False)
    # C's prefill [20.05, 20.35) touches slots 200..203; its decode ends at 21.35 (slot 213).
    assert [by_slot[s][2] for s in range(199, 215)] == ["idle"] + ["prefill"] * 4 + ["decode"] * 10 + ["idle"]
    # E has no prefill_start: it waits for D's prefill to end at 30.5 (slot 305).
    assert by_slot[303] == (1, 0, "prefill", False)
    assert by_slot[305] == (1, 1, "prefill", True)
    assert by_slot[308] == (0, 2, "decode", False)


def test_timeline_tokens_are_the_exact_intervals_spread_over_slots(built):
    """phase_timeline's tokens come from phase_intervals (issue 15): each request's tokens spread
    evenly over its phase interval, summed per 100 ms slot by overlap. Reference: the same spread
    computed here from the request list (E's prefill starts at D's first token, 30.5 s). Bound
    1e-9 token: the table sums interval shares in another order than this loop."""
    con, _, _ = built
    ref = np.zeros((SECONDS * 10, 2))
    for rid, (_, ps, ft, end, pt, ot) in REQUESTS_S.items():
        for col, (a, b, n) in enumerate(((30.5 if rid == "E" else ps, ft, pt), (ft, end, ot))):
            for slot in range(int(a * 10), int(np.ceil(b * 10))):
                ref[slot, col] += n * (min(b, (slot + 1) / 10) - max(a, slot / 10)) / (b - a)
    rows = con.execute(
        "SELECT (epoch_ms(ts) % 86400000) // 100 AS slot, prompt_tokens, output_tokens FROM phase_timeline WHERE gpu = 0 ORDER BY ts"
    ).fetchall()
    assert len(rows) == 600
    for slot, prompt, output in rows:
        assert (prompt, output) == (pytest.approx(ref[slot, 0], abs=1e-9), pytest.approx(ref[slot, 1], abs=1e-9)), slot


def _reference():
    """The independent reference (tests/phase_reference.py) on the fixture: each GPU's samples are
    mid-slot (x.x5 s), power piecewise linear between them."""
    t = T0 + np.arange(SECONDS * 10, dtype=np.int64) * 100_000_000 + 50_000_000
    power = write_known_power_levels()
    reqs = [Request(rid, T0 + round((30.5 if rid == "E" else ps) * 1e9), T0 + round(ft * 1e9), T0 + round(end * 1e9), pt, ot)
            for rid, (_, ps, ft, end, pt, ot) in REQUESTS_S.items()]
    energy = lambda a, b: 2 * interval_energy_j(t, power, a, b)  # noqa: E731 (two identical GPUs)
    charged, totals = attribute(reqs, energy, int(t[0]), int(t[-1]))
    return t, power, energy, charged, totals


def test_segments_exact_boundaries_and_power(built):
    con, _, _ = built
    t, power, energy, _, _ = _reference()
    segs = con.execute(
        """SELECT epoch_ns(start_ts), epoch_ns(end_ts), phase, mean_w, peak_w, energy_j, above_tdp
           FROM phase_segments WHERE source = 'requests' AND gpu = 0 AND phase = 'prefill' ORDER BY start_ts"""
    ).fetchall()
    # event time: the prefills' own boundaries (C's are off the 100 ms grid; D's and E's prefills touch: one run)
    bounds = [(10.0, 10.5), (12.0, 12.2), (20.05, 20.35), (30.0, 30.8)]
    assert [((a - T0) / 1e9, (b - T0) / 1e9) for a, b, *_ in segs] == [pytest.approx(x, abs=1e-9) for x in bounds]
    for a, b, phase, mean_w, peak_w, e, above in segs:
        ref = energy(a, b) / 2
        assert (phase, peak_w, above) == ("prefill", P_PRE, True)
        assert e == pytest.approx(ref, rel=1e-6)
        assert mean_w == pytest.approx(ref / ((b - a) / 1e9), rel=1e-6)
    toks = con.execute(
        "SELECT sum(prompt_tokens), sum(output_tokens) FROM phase_segments WHERE source = 'requests' AND gpu = 0"
    ).fetchone()
    assert toks == (pytest.approx(500 + 200 + 300 + 100 + 60), pytest.approx(100 + 50 + 10 + 20 + 30))


def test_request_energy_exact(built):
    con, _, _ = built
    *_, charged, _ = _reference()
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT request_id, prefill_j, decode_j, total_j, j_per_prompt_token, j_per_output_token, prefill_start_estimated FROM request_energy"
    ).fetchall()}
    tokens = {rid: (v[4], v[5]) for rid, v in REQUESTS_S.items()}
    assert set(got) == set(charged)
    for rid, (pre, dec) in charged.items():
        pt, ot = tokens[rid]
        assert got[rid] == (
            pytest.approx(pre, rel=1e-6), pytest.approx(dec, rel=1e-6), pytest.approx(pre + dec, rel=1e-6),
            pytest.approx(pre / pt, rel=1e-6), pytest.approx(dec / ot, rel=1e-6), rid == "E",
        ), rid
    # A's prefill [10.0, 10.5) on both GPUs: 800 W between its samples (10.05 … 10.45 s), ramps from
    # 450 W (half way from the idle 100 W at 9.95 s) and down to 550 W (half way to the decode 300 W at 10.55 s)
    assert got["A"][0] == pytest.approx(2 * ((450 + 800) / 2 * 0.05 + 800 * 0.4 + (800 + 550) / 2 * 0.05))


def test_conservation_and_checks(built):
    con, outcome, _ = built
    t, power, energy, _, totals = _reference()
    measured = energy(int(t[0]), int(t[-1]))
    attributed = con.execute("SELECT sum(total_j) FROM request_energy").fetchone()[0]
    assert attributed + totals["idle"][1] == pytest.approx(measured, rel=1e-9)
    failed = {(c.asset, c.check) for c in outcome.failed_checks}
    assert ("request_energy", "energy_conservation") not in failed
    assert ("phase_timeline", "clock_skew") not in failed
    assert ("phase_segments", "power_segmentation_agreement") not in failed


def test_power_only_segmentation_matches_on_clean_signal(built):
    con, _, _ = built
    mismatched = con.execute(
        "SELECT count(*) FROM phase_timeline WHERE (phase = 'prefill') <> (power_phase = 'prefill')"
    ).fetchone()[0]
    assert mismatched == 0


def test_energy_per_token_all_and_buckets(built):
    con, _, _ = built
    t, power, energy, charged, totals = _reference()
    row = con.execute(
        """SELECT j_per_prompt_token, j_per_output_token, j_per_request, prefill_mean_w, decode_mean_w,
                  prefill_time_share, prefill_energy_share, tdp_exceedances, requests, idle_j, energy_j
           FROM energy_per_token WHERE bucket_kind = 'all'"""
    ).fetchone()
    (pre_s, pre_j), (dec_s, dec_j), (_, idle_j) = totals["prefill"], totals["decode"], totals["idle"]
    assert row[0] == pytest.approx(pre_j / 1160, rel=1e-6)
    assert row[1] == pytest.approx(dec_j / 210, rel=1e-6)
    assert row[2] == pytest.approx((pre_j + dec_j) / 5, rel=1e-6)
    assert row[3:5] == (pytest.approx(pre_j / 2 / pre_s, rel=1e-6), pytest.approx(dec_j / 2 / dec_s, rel=1e-6))
    assert pre_s == pytest.approx(0.5 + 0.2 + 0.3 + 0.8)
    assert row[5] == pytest.approx(pre_s / (pre_s + dec_s), rel=1e-6)
    assert row[6] == pytest.approx(pre_j / (pre_j + dec_j), rel=1e-6)
    # 4 prefill segments above the 700 W TDP on each of 2 GPUs, over the 2 GPUs' span (0.05 s … 59.95 s).
    assert row[7] == pytest.approx(8 / (2 * 59.9 / 3600), rel=1e-6)
    assert row[8] == 5
    assert row[9] == pytest.approx(idle_j, rel=1e-6)
    assert row[10] == pytest.approx(energy(int(t[0]), int(t[-1])), rel=1e-9)
    kinds = dict(con.execute(
        "SELECT bucket_kind, sum(requests) FROM energy_per_token GROUP BY ALL"
    ).fetchall())
    assert kinds == {"all": 5, "batch_size": 5, "prompt_len": 5, "output_len": 5, "hour": 5, "gpu_model": 5, "power_limit": 5,
                     "model": 5, "gpus_per_replica": 5, "max_tokens": 5}
    assert con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'power_limit'").fetchall() == [("700 W",)]
    assert con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'gpu_model'").fetchall() == [("H200",)]
    # Slot-level batch buckets: slots with 1 request and with 2 (A+B, D+E) exist.
    assert {b for (b,) in con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'batch_size'").fetchall()} == {"1", "2"}


def write_known_power_levels():
    n_pre, n_dec = slot_labels()
    return np.where(n_pre > 0, P_PRE, np.where(n_dec > 1, P_DEC2, np.where(n_dec > 0, P_DEC, P_IDLE)))


@pytest.mark.slow  # runs the daily job on a day of its own
def test_request_without_first_token_counts_as_prefill(tmp_path):
    """A request that failed before its first token is prefill from its start to its end."""
    d = tmp_path / "data"
    endpoint_inventory(d, gpus=1)
    rows = {"F": (5.0, 5.0, None, 6.0, 400, 0)}
    power = [P_PRE if 50 <= i < 60 else P_IDLE for i in range(100)]
    t = [T0 + i * 100_000_000 + 50_000_000 for i in range(100)]
    write_dataset(power_table("infer-0", 0, np.array(t), np.array(power)), d, "power", prefix="p")
    reqs = requests_table(rows)
    write_dataset(reqs, d, "requests", prefix="r")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "request_energy"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", table(d, "phase_timeline"))
    con.register("r", table(d, "request_energy"))
    assert con.execute("SELECT count(*) FROM t WHERE phase = 'prefill'").fetchone()[0] == 10
    ref = interval_energy_j(np.array(t), np.array(power), T0 + 5 * 10**9, T0 + 6 * 10**9)  # 4.95 → 6.05 s ramps at both ends
    assert ref == pytest.approx(0.9 * P_PRE + 2 * 0.05 * (P_PRE + (P_PRE + P_IDLE) / 2) / 2)  # 782.5 J
    assert con.execute("SELECT prefill_j, decode_j, j_per_output_token FROM r").fetchone() == (pytest.approx(ref, rel=1e-9), 0.0, None)

