"""Power-only prefill detection on real H200 captures it was not tuned on (tests/power_captures.py:
the fit/validate split; tests/data/h200-captures/SOURCE.md). All validate captures go through the
`phase_segments` asset in one pipeline day, one host and endpoint each, the driver buffer as the
collector writes it (`nvml-buffer`); reference: the logged prefill intervals, inside the log's busy span.

Bounds (docs/phases.md): IoU ≥ 0.85 under static batching, ≥ 0.6 under continuous batching, or,
where the detector says the workload cannot be resolved from power, that verdict and no segments.
"""

from __future__ import annotations

import duckdb
import pytest

from pipeline.assets.inference_phases import power_resolution
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection, read_day
from tests.days import builds_a_day
from tests.power_captures import prefill_iou, requests, validate_captures, write_captures

ASSETS = ["power_1s", "energy_curve", "phase_intervals", "phase_segments"]
IOU_MIN = {"static": 0.85, "continuous": 0.6}
CAPTURES = validate_captures()
UNRESOLVABLE = {"h200-smoke-tiny-static", "h200-smoke-tiny-continuous"}
"""Captures whose workload the detector must decline (what it then says is asserted)."""


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("captures") / "data"
    date = write_captures(d, CAPTURES)
    outcome = run_day(d, date, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("phase_segments", read_day(d, "phase_segments", date))
    with compute_connection(d, date) as wh:
        resolution = power_resolution(wh)
    return con, outcome, resolution


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_power_only_prefills_on_validate_captures(day, cap):
    con, _, resolution = day
    rows = con.execute(
        "SELECT epoch_ns(start_ts), epoch_ns(end_ts) FROM phase_segments WHERE source = 'power' AND phase = 'prefill' AND endpoint = ?",
        [cap.endpoint],
    ).fetchall()
    verdict = resolution[cap.endpoint]["nvml-buffer"]["power_only"]
    if cap.name in UNRESOLVABLE:
        assert verdict.startswith("prefills cannot be resolved from power alone"), verdict
        assert rows == []  # no guessed prefills; its decode and idle runs stay
        assert con.execute("SELECT count(*) FROM phase_segments WHERE source = 'power' AND endpoint = ?", [cap.endpoint]).fetchone()[0] > 0
        return
    assert verdict == "resolves prefills of a few samples, continuous batching's included", verdict
    got = prefill_iou(rows, requests(cap))
    print(f"{cap.name}: power-only prefill IoU {got:.3f} over {len(rows)} segments")
    assert got >= IOU_MIN[cap.batching]
