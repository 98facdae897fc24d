"""collectors.nvml.live on known answers: sliding extrema, time above TDP, the host's 20 ms grid."""

from __future__ import annotations

import random

import pytest

from collectors.nvml.live import HOLD_MAX_US, SLOT_US, STALE_US, HostGrid, PowerWindows, SlidingExtrema

MS = 1000


def grid(n, start_us=1_000_000_000, step_us=20 * MS):
    return [start_us + k * step_us for k in range(n)]


def test_square_wave_swing_is_high_minus_low_in_every_window_that_holds_an_edge():
    ext = SlidingExtrema(2_000_000)
    for k, ts in enumerate(grid(500)):  # 10 s of a 1 s square wave, 100 ↔ 700 W
        ext.push(ts, 700.0 if (k // 25) % 2 else 100.0)
        if k >= 25:
            assert (ext.max, ext.min, ext.swing) == (700.0, 100.0, 600.0)


def test_ramp_swing_is_slope_times_the_span_of_the_samples_in_the_window():
    pw = PowerWindows()
    for k, ts in enumerate(grid(1000)):  # 20 s rising 10 W/s: 0.2 W per 20 ms sample
        pw.push(ts, 100.0 + 0.2 * k)
    # (t − 2 s, t] holds 100 samples spanning 1.98 s; (t − 10 s, t] 500 samples spanning 9.98 s
    assert pw.swing(2) == pytest.approx(19.8)
    assert pw.swing(10) == pytest.approx(99.8)
    assert pw.swing(60) == pytest.approx(199.8)  # only 20 s of data: all of it
    assert pw.windows[2].max == pytest.approx(100 + 0.2 * 999)


def test_a_single_60ms_spike_is_seen_for_exactly_its_window_then_forgotten():
    ts = grid(400)
    spike = {100, 101, 102}  # three 20 ms samples = 60 ms at 700 W on a 100 W floor
    pw = PowerWindows()
    seen = []
    for k, t in enumerate(ts):
        pw.push(t, 700.0 if k in spike else 100.0)
        seen.append((pw.swing(2), pw.swing(10)))
    # the 2 s window at sample k holds samples k−99..k: the spike is in it for k in 100..201
    assert [k for k, (s2, _) in enumerate(seen) if s2 == 600.0] == list(range(100, 202))
    assert all(s2 == 0.0 for k, (s2, _) in enumerate(seen) if k not in range(100, 202))
    assert all(s10 == 600.0 for s2, s10 in seen[100:])


def test_matches_a_brute_force_rescan_on_random_irregular_samples():
    rng = random.Random(7)
    t, samples = 5_000_000, []
    for _ in range(3000):
        t += rng.choice([1, 5, 19_000, 20_000, 21_000, 300_000])
        samples.append((t, round(rng.uniform(50, 1000), 3)))
    ext = {w: SlidingExtrema(w * 1_000_000) for w in (2, 10)}
    for i, (ts, w) in enumerate(samples):
        for W, e in ext.items():
            e.push(ts, w)
            inside = [v for s, v in samples[: i + 1] if s > ts - W * 1_000_000]
            assert (e.max, e.min) == (max(inside), min(inside))


def test_older_samples_are_ignored_and_time_above_tdp_holds_each_sample_until_the_next():
    pw = PowerWindows()
    pw.threshold_w = 700.0
    for k, ts in enumerate(grid(100)):  # samples 10..29 above 700 W: 20 × 20 ms = 0.4 s above
        pw.push(ts, 750.0 if 10 <= k < 30 else 600.0)
    assert pw.above_s == pytest.approx(0.4)
    assert not pw.push(grid(1)[0], 9999.0) and pw.ignored == 1 and pw.windows[2].max == 750.0
    pw.push(pw.last_ts + 60_000_000, 800.0)  # after a 60 s gap: not counted as time
    pw.push(pw.last_ts + 5_000_000, 600.0)  # held 5 s, capped at 1 s
    assert pw.above_s == pytest.approx(1.4)


def _anti_phase_host(edge_offset_us):
    """GPU 0 samples at k × 20 ms, GPU 1 at k × 20 ms + 7 ms; 100 ↔ 700 W squares in anti-phase with
    edges every 500 ms (+ edge_offset_us): the true sum is 800 W throughout."""
    host = HostGrid([0, 1])
    slots = []
    base = 1_000_000_000
    for batch in range(5):  # 1 s batches, as drained from the driver buffer
        for g, off in ((0, 0), (1, 7 * MS)):
            ts = [base + off + k * SLOT_US for k in range(batch * 50, (batch + 1) * 50)]
            square = [(t, 700.0 if ((t - base - edge_offset_us) // 500_000) % 2 == g else 100.0) for t in ts]
            slots += host.add(g, square)
    return host, slots


def test_host_sum_of_anti_phase_squares_on_offset_grids_is_flat():
    """Edges 3 ms after a slot end: in every slot both GPUs' held samples lie on the same side of the
    edge, so the grid sum is 800 W throughout. (Summing per-GPU swings would say 1200 W.)"""
    host, slots = _anti_phase_host(3 * MS)
    total = PowerWindows()
    for end, w in slots:
        assert end % SLOT_US == 0  # on the common grid
        total.push(end, w)
    assert total.samples >= 240 and total.swing(2) == 0.0 and total.last_w == 800.0
    assert host.incomplete_slots == 1  # the first slot end, 7 ms before GPU 1's first sample


def test_host_sum_shows_one_slot_per_edge_when_the_gpus_are_sampled_on_either_side_of_it():
    """Edges exactly on a slot end: GPU 0's sample at the edge already shows the new value, GPU 1's
    held sample (13 ms earlier) the old one, so that one slot sums to 200 or 1400 W: the known
    sample-and-hold limit (one sample spacing), documented in docs/collector.md."""
    host, slots = _anti_phase_host(0)
    odd = [(end, w) for end, w in slots if w != 800.0]
    edges = [end for end, _ in slots if (end - 1_000_000_000) % 500_000 == 0 and end > 1_000_000_000]
    assert sorted(end for end, _ in odd) == edges and {w for _, w in odd} <= {200.0, 1400.0}


def test_host_slot_waits_for_every_gpu_and_sums_the_held_values():
    host = HostGrid(["a", "b"])
    assert host.add("a", [(20_000, 100.0), (40_000, 110.0), (60_000, 120.0)]) == []  # b has not reported
    # b's samples at 35 and 75 ms: slot ends 40 (a 110 + b 5) and 60 (a 120 + b held 5)
    assert host.add("b", [(35_000, 5.0), (75_000, 6.0)]) == [(40_000, 115.0), (60_000, 125.0)]
    assert host.add("a", [(80_000, 130.0)]) == []  # b's newest (75 ms) is before 80 ms: not final yet
    assert host.add("b", [(95_000, 7.0)]) == [(80_000, 136.0)]
    assert host.incomplete_slots == 1  # the 20 ms slot: b had no sample yet


def test_a_silent_gpu_stops_holding_the_host_back_and_its_slots_are_skipped_not_summed_short():
    host = HostGrid([0, 1])
    host.add(0, [(k * SLOT_US, 100.0) for k in range(1, 11)])
    assert host.add(1, [(k * SLOT_US, 50.0) for k in range(1, 11)])[-1] == (200_000, 150.0)
    later = [(k * SLOT_US, 100.0) for k in range(11, 11 + STALE_US // SLOT_US + 50)]
    slots = host.add(0, later)  # GPU 1 silent for > 5 s: GPU 0 alone moves the grid on
    # GPU 1's last value is held for 250 ms, then its slots are skipped, never summed over GPU 0 alone
    assert slots == [(end, 150.0) for end in range(220_000, 200_000 + HOLD_MAX_US + 1, SLOT_US)]
    assert host.incomplete_slots == len(later) - len(slots)  # every later slot of GPU 0, skipped
    assert host.add(1, [(later[-1][0] + SLOT_US, 60.0)]) == []  # back: waits for GPU 0 to pass it


def test_a_gpu_that_never_reports_does_not_hold_the_host_or_its_memory_forever():
    host = HostGrid([0, 1])
    assert host.add(0, [(k * SLOT_US, 100.0) for k in range(1, 200)]) == []  # 4 s: still waiting for GPU 1
    host.add(0, [(k * SLOT_US, 100.0) for k in range(200, 300)])  # 6 s: GPU 1 counts as stale
    assert len(host.pending[0]) == 0 and host.incomplete_slots == 299
