"""Phase tables on real runs (tests/data/phases, see SOURCE.md): the H200 capture's logged requests
as ground truth for the power-only segmentation, the A100 vLLM smoke runs (power vs request
timings, no prefill_start), and vLLM engine counters for runs without request logs."""

import duckdb
import pytest

from pipeline.assets.inference_phases import power_resolution
from pipeline.phases.checks import segmentation_agreement
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection, read_day
from tests.phase_engine import engine_agreement
from tests.phase_real import write_a100_smoke, write_engine_run, write_h200_capture

ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments", "request_energy"]


def _run(data_dir, date, assets=ASSETS):
    outcome = run_day(data_dir, date, selection=assets)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET VARIABLE partition_date = DATE '{date}'")
    for name in assets:
        con.register(name, read_day(data_dir, name, date))
    return con, {c.check: c for c in outcome.failed_checks}


def _mean_w_by_phase(con):
    return dict(con.execute("SELECT phase, avg(power_w) FROM phase_timeline GROUP BY ALL").fetchall())


@pytest.fixture(scope="module")
def h200(capture_2_day):
    """The shared capture-2 day's phase tables and its failed checks by name (as ``_run`` gives them)."""
    outcome = capture_2_day.outcome
    assert set(ASSETS) <= capture_2_day.tables(), outcome.materialized
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET VARIABLE partition_date = DATE '{capture_2_day.date}'")
    for name in ASSETS:
        con.register(name, read_day(capture_2_day.data_dir, name, capture_2_day.date))
    return con, {c.check: c for c in outcome.failed_checks}


def test_h200_power_only_segmentation_agrees_with_logged_requests(h200):
    con, failed = h200
    [(endpoint, precision, recall, median_err_ms)] = segmentation_agreement(con)
    # Measured 2026-12-02 on the 100 ms grid: precision 1.00, recall 0.81, median boundary error 50 ms;
    # at native resolution (issue 15): see test_phases_event_time_real.py (IoU 0.97).
    assert precision >= 0.9 and recall >= 0.7, (precision, recall)
    assert median_err_ms <= 150
    assert "power_segmentation_agreement" not in failed and "clock_skew" not in failed


def test_h200_prefill_draws_more_than_decode_and_energy_is_conserved(h200):
    con, failed = h200
    w = _mean_w_by_phase(con)
    assert w["prefill"] > 2 * w["decode"] > 2 * 100
    assert "energy_conservation" not in failed
    n, per_out = con.execute("SELECT count(*), sum(decode_j) / sum(output_tokens) FROM request_energy").fetchone()
    assert n == 59 and 0.5 < per_out < 20


@pytest.mark.slow  # runs the daily job on a day of its own
def test_h200_clock_skew_of_two_seconds_is_detected(tmp_path):
    d = tmp_path / "data"
    _, failed = _run(d, write_h200_capture(d, request_offset_s=2.0), ["power_1s", "energy_curve", "power_100ms", "phase_intervals", "phase_timeline"])
    assert "clock_skew" in failed
    assert "+2000 ms" in failed["clock_skew"].description or "+1900 ms" in failed["clock_skew"].description


@pytest.mark.slow  # runs the daily job on a day of its own
def test_h200_power_only_disagreement_is_reported(tmp_path):
    """Requests logged 0.5 s late: power-only prefills (native resolution) no longer line up."""
    d = tmp_path / "data"
    _, failed = _run(d, write_h200_capture(d, request_offset_s=0.5),
                     ["power_1s", "energy_curve", "phase_intervals", "phase_segments"])
    assert "power_segmentation_agreement" in failed
    assert "disagrees with the request log" in failed["power_segmentation_agreement"].description


@pytest.mark.parametrize("run", ["run-1784415083", "run-1784415161"])
@pytest.mark.slow  # runs the daily job on a day of its own
def test_a100_smoke_prefill_time_draws_more_than_decode(tmp_path, run):
    d = tmp_path / "data"
    con, failed = _run(d, write_a100_smoke(d, run))
    w = _mean_w_by_phase(con)
    assert w["prefill"] > w["decode"], w
    # No prefill_start in a benchmark log: every request falls back (arrival / previous prefill end).
    assert con.execute("SELECT bool_and(prefill_start_estimated), count(*) FROM request_energy").fetchone() == (True, 4)
    assert "energy_conservation" not in failed


@pytest.mark.parametrize(
    "name,tdp_w,model,min_precision,min_token_recall",
    [
        # A100 nvidia-smi instant power at 250 ms: measured precision 0.82, token recall 0.51 on the
        # 100 ms grid (hysteresis), 0.78 / 0.46 at native resolution (issue 15, centred instants).
        ("vllm-a100-burstgpt", 400.0, "A100", 0.7, 0.4),
        # H100 power.draw is a 1 s average: ShareGPT prefills (≈ 14 ms each, 4 % of the time under
        # continuous batching) vanish in it; nothing is detected, documented in docs/phases.md.
        ("vllm-h100-qwen3-8b", 700.0, "H100", 0.0, 0.0),
    ],
)
@pytest.mark.slow  # runs the daily job on a day of its own
def test_power_only_segmentation_against_engine_counters(tmp_path, name, tdp_w, model, min_precision, min_token_recall):
    d = tmp_path / "data"
    date, engine = write_engine_run(d, name, tdp_w, model)
    con, _ = _run(d, date, ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments"])
    timeline = con.sql("SELECT ts, power_phase FROM phase_timeline").pl()
    got = engine_agreement(timeline, engine)
    assert got["precision"] >= min_precision and got["token_recall"] >= min_token_recall, got
    # Endpoints without a request log: no request-based labels, only power segments.
    assert con.execute("SELECT count(*) FROM phase_timeline WHERE phase IS NOT NULL").fetchone()[0] == 0
    sources = {s for (s,) in con.execute("SELECT DISTINCT source FROM phase_segments").fetchall()}
    with compute_connection(d, date) as wh:
        [verdict] = [v["power_only"] for by_source in power_resolution(wh).values() for v in by_source.values()]
    assert sources == {"power"}
    # nvidia-smi polled every 250 ms: resolvable for static batching only. The H100's power.draw is
    # a 1 s average polled every 250 ms: the file cannot say so, so it reads as instant, but its
    # power shows no prefill plateau (47 W over decode), which the detector says instead of guessing.
    if name == "vllm-h100-qwen3-8b":
        assert verdict.startswith("prefills cannot be resolved from power alone: no prefill plateau"), verdict
    else:
        assert verdict == "resolves prefills longer than ~500 ms only (static batching), not continuous batching's", verdict
    w = dict(con.execute("SELECT power_phase, avg(power_w) FROM phase_timeline GROUP BY ALL").fetchall())
    assert w["decode"] > w["idle"]
