"""Plausibility of the phase tables on the simulated tiny fleet (6 minutes at its peak)."""

import datetime as dt
import re

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from collectors.simulate import simulate
from pipeline import warehouse
from pipeline.phases.checks import segmentation_agreement
from pipeline.runner import run_day
from pipeline.warehouse import read_day

DAY = dt.date(2026, 11, 30)
DATE = DAY.isoformat()
PHASE_ASSETS = ["phase_timeline", "phase_intervals", "phase_segments", "request_energy", "energy_per_token"]
ASSETS = ["power_1s", "energy_curve", "power_100ms", *PHASE_ASSETS]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim") / "data"
    simulate(d, start=DAY, fleet="tiny", hours=0.1, seed=0)
    outcome = run_day(d, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    return d, outcome


def test_checks_pass_on_the_simulated_fleet(sim):
    _, outcome = sim
    failed = [(c.asset, c.check, str(c.severity)) for c in outcome.failed_checks if c.asset in PHASE_ASSETS]
    # Since the simulator is calibrated on h200-capture-4 (60–90 ms prefills whose power shows 60 ms
    # after they start), power-only prefill detection at 100 ms disagrees with the request log: a WARN
    # (see test_power_only_segmentation_finds_the_simulated_prefills). Every other check passes.
    assert [(a, c) for a, c, _ in failed] in ([], [("phase_segments", "power_segmentation_agreement")]), failed
    assert all(sev.endswith("WARN") for _, _, sev in failed), failed


def test_prefill_draws_more_than_decode_more_than_idle(sim):
    d, _ = sim
    with warehouse.compute_connection(d, DATE) as con:
        w = con.execute(
            "SELECT endpoint, avg(power_w) FILTER (WHERE phase = 'prefill'), avg(power_w) FILTER (WHERE phase = 'decode'),"
            " avg(power_w) FILTER (WHERE phase = 'idle') FROM phase_timeline GROUP BY ALL"
        ).fetchall()
        assert len(w) == 2
        for endpoint, pre, dec, idle in w:
            # Measured (calibrated on capture 4): chat-a 328 / 257 / 86 W, chat-b 286 / 233 / 87 W. A request's
            # prefill interval includes the 60 ms before its power shows, so its mean sits far below the 788 W plateau.
            assert pre > 250 and 150 < dec < 450 and idle < 160 and pre > dec > idle, endpoint
        # The simulated H200s peak above their 700 W TDP in prefill.
        assert con.execute("SELECT count(*) FROM phase_segments WHERE phase = 'prefill' AND above_tdp").fetchone()[0] > 0


@pytest.mark.xfail(strict=True, reason=(
    "calibrated simulator (h200-capture-4): prefills of 60-90 ms whose power shows 60 ms after they start are "
    "mostly invisible on the 100 ms grid; measured precision / recall chat-a 0.56 / 0.22, chat-b 0.29 / 0.16 "
    "(0.98 / 0.88 and 0.94 / 0.76 with the earlier hand-set 0.1-1.2 s prefills). Power-only detection needs "
    "the 20 ms buffer (`simulate --shape collector`) or longer prefills."))
def test_power_only_segmentation_finds_the_simulated_prefills(sim):
    d, _ = sim
    with warehouse.compute_connection(d, DATE) as con:
        for endpoint, precision, recall, err_ms in segmentation_agreement(con):
            # Measured before the calibration: chat-a 0.98 / 0.88, chat-b 0.94 / 0.76, boundary error 100 ms.
            assert precision > 0.85 and recall > 0.65 and err_ms <= 200, endpoint


def test_joules_per_token_are_plausible(sim):
    d, _ = sim
    with warehouse.compute_connection(d, DATE) as con:
        rows = con.execute(
            "SELECT endpoint, j_per_prompt_token, j_per_output_token, prefill_energy_share FROM energy_per_token WHERE bucket_kind = 'all'"
        ).fetchall()
        for endpoint, jp, jo, share in rows:
            # Lower bound from the real H200 (8B model, continuous batching): h200-capture-4 measures
            # 0.021 J per prompt token against the buffer samples (tests/test_phases_event_time_real.py);
            # the simulator is calibrated on that capture.
            assert 0.01 < jp < 1.0 and 0.1 < jo < 10 and 0 < share < 1, endpoint


def test_two_second_request_clock_offset_is_reported(sim, tmp_path):
    d, _ = sim
    shifted = tmp_path / "data"
    simulate(shifted, start=DAY, fleet="tiny", hours=0.1, seed=0)
    for f in (shifted / "requests").glob("date=*/*.parquet"):
        t = pq.read_table(f)
        for col in ("arrival_ts", "prefill_start_ts", "first_token_ts", "end_ts"):
            i = t.schema.get_field_index(col)
            t = t.set_column(i, col, pc.add(t.column(col), pc.cast(2_000_000_000, "duration[ns]")))
        pq.write_table(t, f)
    outcome = run_day(shifted, DATE, selection=["power_1s", "power_100ms", "phase_timeline"])
    skew = [c for c in outcome.failed_checks if c.check == "clock_skew"]
    assert skew
    offsets = dict(re.findall(r"(chat-\w) by ([+-]\d+) ms", skew[0].description))
    assert set(offsets) == {"chat-a", "chat-b"}
    # One grid step of tolerance: a prefill labels every slot it touches, the power rises inside it.
    assert all(abs(int(v) - 2000) <= 100 for v in offsets.values()), offsets


def test_rematerializing_gives_identical_phase_tables(sim):
    d, _ = sim
    before = {n: read_day(d, n, DATE) for n in ASSETS}
    again = run_day(d, DATE, selection=ASSETS)
    assert again.success, again.error
    for name, table in before.items():
        assert read_day(d, name, DATE).equals(table), name
