"""Known answers for the power-only detector at native resolution (pipeline/phases/power_detect.py).

A synthetic GPU decoding at 250 W with prefills at 800 W of 30, 70 and 130 ms (and one of 8 ms),
each starting 5 ms after a sample, sampled every 20 ms as the driver's buffer does (each sample
the exact mean over the 20 ms since the previous one; no onset lead). A sample is high when more
than half its window is prefill, so each prefill must be found as one run from the sample before
it to the sample after it: both boundaries 5 ms off (less than half a sample), IoU 30/40, 70/80,
130/140. What it cannot find: the 8 ms prefill (40 % of one window), and at 100 ms samples the
30 ms one.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.assets.inference_phases import power_resolution
from pipeline.phases.power_detect import detect, detect_gpu
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection, read_day
from tests.builders import DAY, day_start_ns, power_table
from tests.phase_fixtures import endpoint_inventory
from tests.phase_reference import iou

MS = 1_000_000
DECODE_W, PREFILL_W = 250.0, 800.0
PREFILLS_MS = [(205, 235), (605, 675), (1005, 1135)]
TOO_SHORT_MS = (1505, 1513)


def _trailing_means(step_ms: int, prefills: list[tuple[int, int]], span_ms: int = 2000) -> pl.DataFrame:
    """Samples every step_ms; each the exact mean power over (t − step, t] of the step function."""
    t = np.arange(step_ms, span_ms + 1, step_ms)
    p = []
    for x in t:
        inside = sum(max(0, min(x, b) - max(x - step_ms, a)) for a, b in prefills)
        p.append(DECODE_W + (PREFILL_W - DECODE_W) * inside / step_ms)
    return pl.DataFrame({"gk": 1, "t_ns": t * MS, "power_w": p, "tdp_w": 700.0}).with_columns(pl.col("gk").cast(pl.Int64))


def _prefills(runs: pl.DataFrame) -> list[tuple[int, int]]:
    return [(lo, hi) for lo, hi in runs.filter(pl.col("ph") == 2).select("lo", "hi").iter_rows()]


def test_prefills_of_30_70_130_ms_at_20_ms():
    runs = detect(_trailing_means(20, PREFILLS_MS + [TOO_SHORT_MS]), lead_ns=0, trailing=True)
    got = _prefills(runs)
    # exactly the three prefills, each from the sample before it to the sample after it
    assert got == [(200 * MS, 240 * MS), (600 * MS, 680 * MS), (1000 * MS, 1140 * MS)]
    for (a, b), (lo, hi) in zip(PREFILLS_MS, got, strict=False):
        assert abs(lo - a * MS) <= 10 * MS and abs(hi - b * MS) <= 10 * MS  # within half a sample
    true = [(a * MS, b * MS) for a, b in PREFILLS_MS]
    assert [iou([g], [t]) for g, t in zip(got, true, strict=False)] == [pytest.approx(30 / 40), pytest.approx(70 / 80), pytest.approx(130 / 140)]
    # runs partition the time: contiguous, the rest is decode
    rows = runs.sort("lo").rows()
    assert all(r[3] == s[2] for r, s in zip(rows, rows[1:], strict=False))
    assert set(runs.filter(pl.col("ph") != 2)["ph"].to_list()) == {1}
    assert runs.filter(pl.col("ph") == 2)["peak_w"].max() == pytest.approx(PREFILL_W)


def test_what_it_cannot_resolve():
    # 8 ms fills 40 % of one 20 ms window: below the 50 % point, not a prefill
    runs = detect(_trailing_means(20, PREFILLS_MS + [TOO_SHORT_MS]), lead_ns=0, trailing=True)
    assert not [r for r in _prefills(runs) if r[1] > 1400 * MS]
    # at 100 ms samples the 30 ms prefill is 30 % of a window: gone; the longer ones are found, coarsely
    coarse = _prefills(detect(_trailing_means(100, PREFILLS_MS), lead_ns=0, trailing=True))
    assert not [r for r in coarse if r[0] < 400 * MS]
    assert coarse == [(600 * MS, 700 * MS), (1000 * MS, 1100 * MS)]


def test_onset_lead_moves_only_prefill_starts():
    """The driver buffer's 60 ms lead: each prefill run starts at the window boundary at most one
    sample before (first high window − 60 ms); ends do not move."""
    runs = detect(_trailing_means(20, PREFILLS_MS), lead_ns=60 * MS, trailing=True)
    assert _prefills(runs) == [(140 * MS, 240 * MS), (540 * MS, 680 * MS), (940 * MS, 1140 * MS)]


def test_instant_samples_are_centred():
    """Instant readings stand for their moment: a run spans midpoints between samples."""
    t = np.arange(0, 2001, 100)
    p = [PREFILL_W if 600 <= x <= 800 else DECODE_W for x in t]
    s = pl.DataFrame({"gk": 1, "t_ns": t * MS, "power_w": p, "tdp_w": 700.0}).with_columns(pl.col("gk").cast(pl.Int64))
    assert _prefills(detect(s, trailing=False)) == [(550 * MS, 850 * MS)]


def test_a_gap_ends_a_run():
    s = _trailing_means(20, PREFILLS_MS)
    s = s.filter((pl.col("t_ns") <= 620 * MS) | (pl.col("t_ns") > 2700 * MS)).vstack(
        _trailing_means(20, [(3005, 3135)], span_ms=4000).filter(pl.col("t_ns") > 2700 * MS))
    runs = detect(s.sort("t_ns"), trailing=True)
    assert _prefills(runs) == [(200 * MS, 240 * MS), (600 * MS, 620 * MS), (3000 * MS, 3140 * MS)]
    assert not runs.filter((pl.col("lo") < 2700 * MS) & (pl.col("hi") > 620 * MS)).height  # nothing across the gap


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_1s_average_source_gets_no_power_segments(tmp_path):
    """A GPU whose only source is a 1 s average (rows with power_avg_w and no power_w): no power-only
    segments, power_phase NULL, and the resolution says why; its energy still comes from the curve."""
    d = tmp_path / "data"
    endpoint_inventory(d, endpoint="ep-avg", gpus=1)
    t = day_start_ns(DAY) + 3600 * 10**9 + np.arange(600, dtype=np.int64) * 10**9
    p = np.where((np.arange(600) % 10) < 2, PREFILL_W, DECODE_W)
    table = power_table("infer-0", 0, t, p, source="dcgm")
    avg = table.column("power_w")
    table = table.set_column(table.schema.get_field_index("power_w"), "power_w", pa.nulls(len(t), avg.type))
    table = table.set_column(table.schema.get_field_index("power_avg_w"), "power_avg_w", avg.cast(table.schema.field("power_avg_w").type))
    write_dataset(table, d, "power", prefix="avg")
    date = DAY.isoformat()
    outcome = run_day(d, date, selection=["power_1s", "energy_curve", "power_100ms", "phase_intervals", "phase_segments", "phase_timeline"])
    assert outcome.success, outcome.error
    segs = pl.from_arrow(read_day(d, "phase_segments", date))
    assert segs.height == 0
    timeline = pl.from_arrow(read_day(d, "phase_timeline", date))
    assert timeline.height > 0 and timeline["power_phase"].null_count() == timeline.height
    with compute_connection(d, date) as con:
        assert power_resolution(con) == {"ep-avg": {"dcgm": {
            "sample_interval_ms": 1000.0, "power_only": "prefills cannot be resolved at 1000 ms: the source is a 1 s average"}}}


@pytest.mark.parametrize("trailing", [True, False])
@pytest.mark.parametrize("lead_ns", [0, 60 * MS, 200 * MS])
def test_numpy_detector_gives_the_polars_runs(trailing, lead_ns):
    """detect_gpu (the asset's one-GPU numpy path) returns detect's frame exactly: jittered 20 ms
    samples with prefill bursts, repeated power values (ties at the levels), gaps over 2 s (a lone
    sample between two of them) and tiny inputs."""
    rng = np.random.default_rng(11)
    n = 20_000
    t = np.cumsum(rng.integers(15 * MS, 25 * MS, n))
    t[5_000:] += 3_000 * MS
    t[5_001:] += 2_500 * MS  # sample 5,000 alone between two gaps
    t[12_000:] += 10_000 * MS
    busy = rng.random(n) < 0.85
    w = np.where(busy, 250.0 + 30 * rng.standard_normal(n), 80.0)
    w[rng.random(n) < 0.05] = 800.0
    w = np.round(w / 5) * 5  # ties
    for k in (n, 1, 2, 3):
        frame = pl.DataFrame({"gk": 7, "t_ns": t[:k], "power_w": w[:k], "tdp_w": 700.0}).with_columns(pl.col("gk").cast(pl.Int64))
        want = detect(frame, lead_ns, trailing)
        got = detect_gpu(7, t[:k], w[:k], 700.0, lead_ns, trailing)
        assert got.schema == want.schema
        assert got.equals(want), k


def test_levels_without_sorting_are_the_sorted_levels():
    """The detector's levels found by partitions (_levels_unsorted) are the sorted array's elements
    _levels_of picks: ties at every level, all samples idle (no busy one), one sample, an infinite
    sample, no TDP, a TDP under every sample."""
    from pipeline.phases.power_detect import _levels_of, _levels_unsorted

    rng = np.random.default_rng(5)
    shapes = [
        np.round(np.where(rng.random(10_001) < 0.8, 250 + 40 * rng.standard_normal(10_001), 80.0) / 5) * 5,
        np.full(997, 80.0),
        np.array([312.5]),
        np.r_[rng.uniform(60, 900, 4_000), np.inf],
        rng.integers(0, 4, 5_000).astype(float) * 100,
    ]
    for w in shapes:
        for tdp in (700.0, None, 10.0):
            assert _levels_unsorted(w.copy(), tdp) == _levels_of(np.sort(w), tdp), (len(w), tdp)


def test_levels_of_a_float32_power_are_those_of_its_float64_copy():
    """gpu_levels partitions a FLOAT power as float32 (Curve.power_w_narrowest): the same levels as
    its float64 copy, the busy threshold compared in double. A threshold that rounds up to a sample's
    float32 value (111.018997... W here) keeps that sample busy, as in double: compared in float32 it
    was not, and the decode level jumped from that sample to the next."""
    from pipeline.phases.power_detect import _levels_unsorted, gpu_levels

    idle = np.float32(80.02)  # idle + 5 % of (TDP - idle) is 111.018996..., whose float32 is above it
    edge = np.float32(float(idle) + 0.05 * (700.0 - float(idle)))
    assert float(edge) > float(idle) + 0.05 * (700.0 - float(idle))
    w = np.concatenate([np.full(300, idle), np.full(400, edge), np.full(300, np.float32(300.0))]).astype(np.float32)
    want = _levels_unsorted(w.astype(np.float64), 700.0)
    assert want[1] == float(edge)  # the edge samples are busy: the busy samples' lower quartile
    assert _levels_unsorted(w.copy(), 700.0) == want
    assert gpu_levels(w, 700.0) == (want, True)


def test_median_spacing_is_numpys_median_at_any_width():
    """source_stats' median spacing (median_ns, int32 where every spacing fits) is np.median of the
    int64 spacings: odd and even counts (the middle two averaged), and spacings that do not fit
    int32 (a last row marked linked gives minus its instant, as Curve.next_gaps_ns does)."""
    from pipeline.assets.inference_phases import median_ns

    rng = np.random.default_rng(3)
    for gaps in (
        rng.integers(19_000_000, 21_000_000, 10_001),
        rng.integers(1, 2_000_000_000, 10_000),
        np.array([7, 8], dtype=np.int64),
        np.array([2_000_000_000], dtype=np.int64),
        np.r_[rng.integers(19_000_000, 21_000_000, 999), -1_764_720_000 * 10**9],
    ):
        gaps = gaps.astype(np.int64)
        assert median_ns(gaps) == float(np.median(gaps))
