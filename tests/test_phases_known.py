"""Phase tables on a constructed endpoint: exact boundaries, energies and J/token."""

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from collectors.parquet_sink import write_dataset

from pipeline.runner import run_day
from tests.builders import DAY, power_table
from tests.phase_fixtures import P_DEC, P_DEC2, P_IDLE, P_PRE, T0, endpoint_inventory, requests_table, write_known_endpoint
from pipeline.warehouse import read_day

DATE = DAY.isoformat()


def table(data_dir, name):
    return read_day(data_dir, name, DATE)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("known") / "data"
    power = write_known_endpoint(data_dir)
    outcome = run_day(data_dir, DATE)
    assert outcome.success, outcome.error
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


def test_segments_exact_boundaries_and_power(built):
    con, _, _ = built
    segs = con.execute(
        """SELECT strftime(start_ts, '%S.%g'), strftime(end_ts, '%S.%g'), phase, mean_w, peak_w, energy_j, above_tdp
           FROM phase_segments WHERE source = 'requests' AND gpu = 0 AND phase = 'prefill' ORDER BY start_ts"""
    ).fetchall()
    assert segs == [
        ("10.000", "10.500", "prefill", P_PRE, P_PRE, pytest.approx(P_PRE * 0.5), True),
        ("12.000", "12.200", "prefill", P_PRE, P_PRE, pytest.approx(P_PRE * 0.2), True),
        ("20.000", "20.400", "prefill", P_PRE, P_PRE, pytest.approx(P_PRE * 0.4), True),
        ("30.000", "30.800", "prefill", P_PRE, P_PRE, pytest.approx(P_PRE * 0.8), True),
    ]
    toks = con.execute(
        "SELECT sum(prompt_tokens), sum(output_tokens) FROM phase_segments WHERE source = 'requests' AND gpu = 0"
    ).fetchone()
    assert toks == (pytest.approx(500 + 200 + 300 + 100 + 60), pytest.approx(100 + 50 + 10 + 20 + 30))


def test_request_energy_exact(built):
    con, _, _ = built
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT request_id, prefill_j, decode_j, total_j, j_per_prompt_token, j_per_output_token, prefill_start_estimated FROM request_energy"
    ).fetchall()}
    g = 2 * 0.1  # two GPUs, 100 ms slots: joules per slot = g × W
    shared = 10 * g * P_DEC2  # 12.2–13.2: A and B decode together, split 25 : 50 tokens/s
    a_dec = 28 * g * P_DEC + shared / 3
    b_dec = shared * 2 / 3
    d_rate, e_rate = 20 / 0.5, 30 / 0.7  # 308, 309: D and E decode together
    both = 2 * g * P_DEC2
    d_dec = both * d_rate / (d_rate + e_rate)
    e_dec = both - d_dec + 5 * g * P_DEC
    expected = {
        "A": (5 * g * P_PRE, a_dec, 500, 100, False),
        "B": (2 * g * P_PRE, b_dec, 200, 50, False),
        "C": (4 * g * P_PRE, 10 * g * P_DEC, 300, 10, False),
        "D": (5 * g * P_PRE, d_dec, 100, 20, False),
        "E": (3 * g * P_PRE, e_dec, 60, 30, True),
    }
    assert set(got) == set(expected)
    for rid, (pre, dec, pt, ot, est) in expected.items():
        assert got[rid] == (
            pytest.approx(pre, rel=1e-9), pytest.approx(dec, rel=1e-9), pytest.approx(pre + dec, rel=1e-9),
            pytest.approx(pre / pt, rel=1e-9), pytest.approx(dec / ot, rel=1e-9), est,
        ), rid
    assert got["A"][3] == pytest.approx(1.6)  # 800 W × 2 GPUs × 0.5 s / 500 tokens


def test_conservation_and_checks(built):
    con, outcome, power = built
    measured = 2 * 0.1 * power.sum()
    attributed = con.execute("SELECT sum(total_j) FROM request_energy").fetchone()[0]
    idle = 2 * 0.1 * P_IDLE * (power == P_IDLE).sum()
    assert attributed + idle == pytest.approx(measured, rel=1e-9)
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
    con, _, power = built
    row = con.execute(
        """SELECT j_per_prompt_token, j_per_output_token, j_per_request, prefill_mean_w, decode_mean_w,
                  prefill_time_share, prefill_energy_share, tdp_exceedances, requests, idle_j, energy_j
           FROM energy_per_token WHERE bucket_kind = 'all'"""
    ).fetchone()
    g = 2 * 0.1
    pre_slots = 5 + 2 + 4 + 5 + 3
    dec = power[(power == P_DEC) | (power == P_DEC2)]
    dec_j = g * dec.sum()
    assert row[0] == pytest.approx(pre_slots * g * P_PRE / 1160)
    assert row[1] == pytest.approx(dec_j / 210)
    assert row[2] == pytest.approx((pre_slots * g * P_PRE + dec_j) / 5)
    assert row[3:5] == (pytest.approx(P_PRE), pytest.approx(dec.mean()))
    assert row[5] == pytest.approx(pre_slots / (pre_slots + len(dec)))
    assert row[6] == pytest.approx(pre_slots * P_PRE / (pre_slots * P_PRE + dec.sum()))
    # 4 prefill segments above the 700 W TDP on each of 2 GPUs, over 2 GPU × 60 s.
    assert row[7] == pytest.approx(8 / (2 * 60 / 3600))
    assert row[8] == 5
    assert row[9] == pytest.approx(g * P_IDLE * (power == P_IDLE).sum())
    assert row[10] == pytest.approx(g * power.sum())
    kinds = dict(con.execute(
        "SELECT bucket_kind, sum(requests) FROM energy_per_token GROUP BY ALL"
    ).fetchall())
    assert kinds == {"all": 5, "batch_size": 5, "prompt_len": 5, "output_len": 5, "hour": 5, "gpu_model": 5, "power_limit": 5}
    assert con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'power_limit'").fetchall() == [("700 W",)]
    assert con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'gpu_model'").fetchall() == [("H200",)]
    # Slot-level batch buckets: slots with 1 request and with 2 (A+B, D+E) exist.
    assert {b for (b,) in con.execute("SELECT bucket FROM energy_per_token WHERE bucket_kind = 'batch_size'").fetchall()} == {"1", "2"}


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
    outcome = run_day(d, DATE, selection=["power_1s", "power_100ms", "phase_timeline", "request_energy"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("t", table(d, "phase_timeline"))
    con.register("r", table(d, "request_energy"))
    assert con.execute("SELECT count(*) FROM t WHERE phase = 'prefill'").fetchone()[0] == 10
    assert con.execute("SELECT prefill_j, decode_j, j_per_output_token FROM r").fetchone() == (pytest.approx(10 * 0.1 * P_PRE), 0.0, None)

