"""Event-time phases on a constructed continuous-batching endpoint: prefills of 30, 70 and 130 ms
squeezed between decode steps, boundaries on the samples (10 ms), power a known level per phase.
Energies are known in closed form: an interval [a, b] at level L followed by level L' holds
L (b − a − 10 ms) + (L + L') / 2 × 10 ms (the last sample interval ramps to the next level)."""

import duckdb
import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.phase_fixtures import T0, endpoint_inventory, requests_table
from tests.phase_reference import iou

DATE = DAY.isoformat()
MS = 1_000_000
STEP = 10 * MS
P_PRE, P_DEC1, P_DEC2, P_IDLE = 800.0, 300.0, 400.0, 100.0
# request: (arrival, prefill_start, first_token, end, prompt_tokens, output_tokens), s after midnight
REQ = {
    "R1": (1.0, 1.0, 1.03, 3.0, 300, 100),    # 30 ms prefill
    "R2": (1.5, 1.5, 1.57, 2.5, 700, 93),     # 70 ms prefill while R1 decodes
    "R3": (2.0, 2.0, 2.13, 4.0, 1300, 187),   # 130 ms prefill while R1 and R2 decode
}
# the endpoint's exact timeline: (start, end, label, power level)
TIMELINE = [
    (0.0, 1.0, "idle", P_IDLE), (1.0, 1.03, "prefill", P_PRE), (1.03, 1.5, "decode", P_DEC1),
    (1.5, 1.57, "prefill", P_PRE), (1.57, 2.0, "decode", P_DEC2), (2.0, 2.13, "prefill", P_PRE),
    (2.13, 2.5, "decode", P_DEC2), (2.5, 3.0, "decode", P_DEC2), (3.0, 4.0, "decode", P_DEC1), (4.0, 6.0, "idle", P_IDLE),
]


def closed_form_j(k: int) -> float:
    """Energy of TIMELINE[k] on one GPU (the last interval has no ramp: the trace ends on its last sample)."""
    a, b, _, level = TIMELINE[k]
    if k + 1 == len(TIMELINE):
        return level * (b - a)
    nxt = TIMELINE[k + 1][3]
    return level * (b - a - 0.01) + (level + nxt) / 2 * 0.01


@pytest.fixture(scope="module")
@builds_a_day
def exact(tmp_path_factory):
    d = tmp_path_factory.mktemp("exact") / "data"
    endpoint_inventory(d, gpus=2)
    n = 601  # 0 … 6.00 s every 10 ms
    t_s = np.arange(n) * 0.01
    p = np.empty(n)
    for a, b, _, level in TIMELINE:
        p[(t_s >= a - 1e-9) & (t_s < b - 1e-9)] = level
    p[-1] = TIMELINE[-1][3]
    t = T0 + np.arange(n, dtype=np.int64) * STEP
    for gpu in range(2):
        write_dataset(power_table("infer-0", gpu, t, p, source="nvml-buffer"), d, "power", prefix=f"g{gpu}")
    write_dataset(requests_table(REQ), d, "requests", prefix="req")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals",
                                          "phase_segments", "request_energy", "energy_per_token"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in ("phase_intervals", "phase_segments", "request_energy", "energy_per_token"):
        con.register(name, read_day(d, name, DATE))
    return con, outcome


def _s(ns):
    return round((ns - T0) / 1e9, 6)


def test_intervals_are_the_timeline(exact):
    con, _ = exact
    rows = con.execute("SELECT start_ns, end_ns, phase, energy_j FROM phase_intervals ORDER BY start_ns").fetchall()
    assert [(_s(a), _s(b), ph) for a, b, ph, _ in rows] == [(a, b, ph) for a, b, ph, _ in TIMELINE]
    for k, (*_, e) in enumerate(rows):
        assert e == pytest.approx(2 * closed_form_j(k), rel=1e-6), TIMELINE[k]


def test_prefill_segments_exact_and_iou_one(exact):
    con, _ = exact
    segs = con.execute(
        """SELECT epoch_ns(start_ts), epoch_ns(end_ts), energy_j, mean_w, peak_w, above_tdp FROM phase_segments
           WHERE source = 'requests' AND phase = 'prefill' AND gpu = 0 ORDER BY start_ts"""
    ).fetchall()
    logged = [(T0 + round(ps * 1e9), T0 + round(ft * 1e9)) for _, ps, ft, *_ in REQ.values()]
    assert [(a, b) for a, b, *_ in segs] == logged
    assert iou([(a, b) for a, b, *_ in segs], logged) == 1.0
    for (a, b, e, mean_w, peak_w, above), k in zip(segs, (1, 3, 5), strict=False):
        assert e == pytest.approx(closed_form_j(k), rel=1e-6)
        assert mean_w == pytest.approx(e / ((b - a) / 1e9), rel=1e-6)
        assert peak_w == P_PRE and above


def test_request_energy_exact_and_overlaps_split_by_token_rate(exact):
    con, _ = exact
    got = {r[0]: r[1:] for r in con.execute("SELECT request_id, prefill_j, decode_j FROM request_energy").fetchall()}
    e = [2 * closed_form_j(k) for k in range(len(TIMELINE))]
    rate = {rid: out / (end - ft) for rid, (_, _, ft, end, _, out) in REQ.items()}
    # decode intervals and who decodes in them: R1 alone, R1+R2, R1+R2+R3, R1+R3, R3 alone
    shared = {2: ["R1"], 4: ["R1", "R2"], 6: ["R1", "R2", "R3"], 7: ["R1", "R3"], 8: ["R3"]}
    dec = {rid: 0.0 for rid in REQ}
    for k, who in shared.items():
        for rid in who:
            dec[rid] += e[k] * rate[rid] / sum(rate[x] for x in who)
    pre = {"R1": e[1], "R2": e[3], "R3": e[5]}
    for rid in REQ:
        assert got[rid] == (pytest.approx(pre[rid], rel=1e-6), pytest.approx(dec[rid], rel=1e-6)), rid
    # R2's prefill interrupts R1's decode: that time is prefill energy, R1 gets nothing of it
    assert sum(v[1] for v in got.values()) == pytest.approx(sum(e[k] for k in shared), rel=1e-9)


def test_conservation_exact(exact):
    con, outcome = exact
    measured = con.execute("SELECT sum(energy_j) FROM phase_intervals").fetchone()[0]
    charged = con.execute("SELECT sum(total_j) FROM request_energy").fetchone()[0]
    idle = con.execute("SELECT sum(energy_j) FROM phase_intervals WHERE phase = 'idle'").fetchone()[0]
    assert charged + idle == pytest.approx(measured, rel=1e-9)
    assert measured == pytest.approx(2 * sum(closed_form_j(k) for k in range(len(TIMELINE))), rel=1e-9)
    assert ("request_energy", "energy_conservation") not in {(c.asset, c.check) for c in outcome.failed_checks}


def test_energy_per_token_shares_exact(exact):
    con, _ = exact
    row = con.execute(
        "SELECT j_per_prompt_token, prefill_time_share, prefill_mean_w FROM energy_per_token WHERE bucket_kind = 'all'"
    ).fetchone()
    pre_j = 2 * sum(closed_form_j(k) for k in (1, 3, 5))
    assert row[0] == pytest.approx(pre_j / 2300, rel=1e-6)
    assert row[1] == pytest.approx(0.23 / 3.0, rel=1e-6)  # 230 ms of prefill in 3 s busy
    assert row[2] == pytest.approx(pre_j / 2 / 0.23, rel=1e-6)
