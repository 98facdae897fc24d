"""kernels.max_swings and grid.sliding_max_swing (block-pruned, then slid exactly where it can
matter) against a brute force over every window, on random series built to put the best window
across block edges, inside runs split by gaps or holes, on ties and on a few samples."""

import numpy as np
import polars as pl
import pytest

from pipeline import kernels
from pipeline.grid import AlignedBlocks, aligned_extremes, grid_stats, sliding_max_swing, window_extremes
from pipeline.kernels import RUN_GAP_NS, max_swings

S = 1_000_000_000


def brute_force(t_ns: np.ndarray, p: np.ndarray, window_s: int) -> float:
    """max over samples i of (max − min of the same run's samples in (t_i − W, t_i])."""
    run = np.cumsum(np.r_[True, np.diff(t_ns) > RUN_GAP_NS])
    best = 0.0
    for i in range(len(t_ns)):
        inside = (t_ns > t_ns[i] - window_s * S) & (t_ns <= t_ns[i]) & (run == run[i])
        best = max(best, float(p[inside].max() - p[inside].min()))
    return best


@pytest.mark.parametrize("fine_from", [20_000, 0], ids=["pairs", "fine"])
@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed, fine_from, monkeypatch):
    monkeypatch.setattr(kernels, "FINE_FROM_SAMPLES", fine_from)  # 0: the fine bound on every series
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    step = rng.choice([20_000_000, 100_000_000, 700_000_000])
    dt = np.maximum(1, rng.normal(step, step / 3, n)).astype(np.int64)
    dt[rng.random(n) < 0.02] = rng.integers(2 * S, 12 * S)  # gaps that end a run (or nearly)
    t = 1_795_996_800 * S + rng.integers(0, 3 * S) + np.cumsum(dt)
    p = np.round(300 + 100 * rng.standard_normal(n), 0 if seed % 3 == 0 else 3)  # rounded: ties
    p[rng.random(n) < 0.01] += 500  # rare spikes, anywhere relative to the blocks
    windows = (1, 2, 10, 60)
    got = max_swings(pl.DataFrame({"gpu": np.zeros(n, np.int64), "t_ns": t, "p": p}), windows).sort("window_s")
    assert got["max_swing_w"].to_list() == [brute_force(t, p, w) for w in windows]
    assert got["sample_interval_ms"][0] == (np.median(np.diff(t)) / 1e6 if n > 1 else None)


def test_several_gpus_and_empty():
    t = 1_795_996_800 * S + np.arange(100) * 100_000_000
    df = pl.DataFrame({"gpu": np.repeat([0, 3], 50), "t_ns": np.r_[t[:50], t[:50]], "p": np.r_[np.arange(50.0), np.zeros(50)]})
    got = max_swings(df, (1, 2)).sort("gpu", "window_s")
    assert got.select("gpu", "window_s", "max_swing_w").rows() == [(0, 1, 9.0), (0, 2, 19.0), (3, 1, 0.0), (3, 2, 0.0)]
    assert max_swings(df.clear(), (1, 2)).is_empty()
    assert max_swings(pl.DataFrame(), (1, 2)).columns == ["gpu", "window_s", "max_swing_w", "sample_interval_ms"]  # a day without GPUs


def brute_force_grid(values: np.ndarray, ok: np.ndarray, n: int) -> float | None:
    """max over every run of n consecutive ok bins of max − min, one window at a time."""
    found = [float(values[i: i + n].max() - values[i: i + n].min()) for i in range(len(values) - n + 1) if ok[i: i + n].all()]
    return max(found) if found else None


@pytest.mark.parametrize("seed", range(40))
def test_grid_sliding_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 5, 10, 50]))
    bins = n * int(rng.integers(1, 40))
    values = np.round(np.cumsum(rng.standard_normal(bins)) * 50, 0 if seed % 3 == 0 else 3)  # drift; rounded: ties
    values[rng.random(bins) < 0.01] += 500  # rare spikes, anywhere relative to the blocks
    ok = rng.random(bins) > rng.choice([0.0, 0.01, 0.1, 0.5])  # holes: windows over them do not count
    assert sliding_max_swing(values, ok, n) == brute_force_grid(values, ok, n)


@pytest.mark.parametrize("seed", range(30))
def test_aligned_windows_as_the_sliding_ones(seed):
    """grid_stats without sliding (a GPU's grid columns) takes its aligned windows from
    aligned_extremes: the same extremes as window_extremes at starts 0, n, 2n, ..., so the same rows
    as the sliding computation less its max swing, on series with carried and leaning values."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 5, 10, 20]))
    bins = n * int(rng.integers(1, 40))
    values = np.round(np.cumsum(rng.standard_normal(bins)) * 50, 0 if seed % 3 == 0 else 3)
    ok = rng.random(bins) > rng.choice([0.0, 0.05, 0.3])
    carried = np.where(rng.random(bins) < 0.3, rng.integers(0, n + 2, bins), 0).astype(np.int64)
    ahead = np.where(rng.random(bins) < 0.2, rng.integers(0, n + 2, bins), 0).astype(np.int64) if seed % 2 else None
    hi, lo, full = window_extremes(values, ok, carried, n, ahead)
    a_hi, a_lo, a_full = aligned_extremes(values, ok, carried, n, ahead)
    assert np.array_equal(hi[::n], a_hi) and np.array_equal(lo[::n], a_lo) and np.array_equal(full[::n], a_full)
    step_ms = 1000 // (n // 2) if n % 2 == 0 and 1000 % (n // 2) == 0 else None
    if step_ms is None:
        return
    slid = grid_stats(values, ok, step_ms, [2], 700.0, slide=True, carried=carried, ahead=ahead)
    aligned = grid_stats(values, ok, step_ms, [2], 700.0, slide=False, carried=carried, ahead=ahead)
    assert [{**r, "max_swing_w": None} for r in slid] == aligned


@pytest.mark.parametrize("seed", range(20))
def test_aligned_blocks_of_several_lengths_as_aligned_extremes(seed):
    """AlignedBlocks (one pass at the lengths' common divisor, the leaning bins added after) gives
    every length the extremes and complete windows aligned_extremes gives it alone, on series
    with carried and leaning values, holes and none of either."""
    rng = np.random.default_rng(seed)
    lengths = [10, 20, 100, 600] if seed % 2 else [4, 6, 12]
    bins = 1200 * int(rng.integers(1, 4))
    values = np.round(np.cumsum(rng.standard_normal(bins)) * 50, 0 if seed % 3 == 0 else 3)
    ok = rng.random(bins) > rng.choice([0.0, 0.01, 0.3])
    carried = np.where(rng.random(bins) < 0.05, rng.integers(0, 12, bins), 0).astype(np.int64) if seed % 4 else None
    ahead = np.where(rng.random(bins) < 0.05, rng.integers(0, 12, bins), 0).astype(np.int64) if seed % 3 else None
    blocks = AlignedBlocks(values, ok, carried, ahead, lengths)
    for n in lengths:
        hi, lo, count = blocks.extremes(n)
        want_hi, want_lo, want_full = aligned_extremes(values, ok, carried if carried is not None else np.zeros(bins, np.int64), n, ahead)
        assert np.array_equal(hi, want_hi) and np.array_equal(lo, want_lo), n
        assert np.array_equal(count == n, want_full) and np.array_equal(count, ok.reshape(-1, n).sum(axis=1)), n


def brute_force_window_extremes(values, ok, carried, n, ahead):
    """window_extremes by its definition, one window at a time: a window starting at s uses bin
    s + d where it is ok, was not carried from before s and leans on no sample after its end."""
    starts = len(values) - n + 1
    hi, lo, full = np.full(starts, -np.inf), np.full(starts, np.inf), np.zeros(starts, bool)
    for s in range(starts):
        used = [values[s + d] for d in range(n) if ok[s + d] and carried[s + d] <= d and ahead[s + d] <= n - 1 - d]
        if used:
            hi[s], lo[s] = max(used), min(used)
        full[s] = ok[s: s + n].all()
    return hi, lo, full


@pytest.mark.parametrize("seed", range(30))
def test_window_extremes_of_a_series_that_reported_for_part_of_its_day(seed):
    """Bins before the first ok bin and after the last (a host that reported for part of the day),
    the ok span anywhere from the series' edges to its middle: every window's extremes and
    completeness as the definition gives them."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 2, 5, 10, 20]))
    bins = int(rng.integers(n, 400))
    values = np.round(np.cumsum(rng.standard_normal(bins)) * 50, 0 if seed % 3 == 0 else 3)
    a, b = sorted(int(x) for x in rng.integers(0, bins + 1, 2))
    ok = np.zeros(bins, bool)
    ok[a:b] = rng.random(b - a) > rng.choice([0.0, 0.05, 0.3])
    carried = np.where(rng.random(bins) < 0.3, rng.integers(0, n + 2, bins), 0).astype(np.int64)
    ahead = np.where(rng.random(bins) < 0.2, rng.integers(0, n + 2, bins), 0).astype(np.int64)
    got = window_extremes(values, ok, carried, n, ahead if seed % 2 else None)
    want = brute_force_window_extremes(values, ok, carried, n, ahead if seed % 2 else np.zeros(bins, np.int64))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w), seed


def test_window_extremes_costs_the_bins_that_reported_not_the_day():
    """A 1 s source's minute on a day's 20 ms grid (4.32 M bins, each value held over its second's
    50 bins): the 2 s windows' extremes in well under a pass per offset over the whole day (~1.9 s
    of CPU on a 2-core box; ~0.1 s for the minute's bins)."""
    import time

    bins = 86_400 * 50
    values, ok, carried = np.zeros(bins), np.zeros(bins, bool), np.zeros(bins, np.int64)
    first = 36_000 * 50  # 10:00
    ok[first: first + 60 * 50] = True
    values[first: first + 60 * 50] = np.repeat(np.arange(60) % 7 * 100.0, 50)
    carried[first: first + 60 * 50] = np.tile(np.arange(50), 60)
    start = time.process_time()
    hi, lo, full = window_extremes(values, ok, carried, 100)
    cpu_s = time.process_time() - start
    assert cpu_s < 0.6, cpu_s
    # a window that starts at the minute's last second uses that second's 50 bins only: 59 % 7 × 100 W
    assert hi[first + 59 * 50] == lo[first + 59 * 50] == 300.0 and full[first + 58 * 50] and not full[first + 59 * 50 + 1]
    assert np.isneginf(hi[:first - 100]).all() and not full[:first].any() and not full[first + 60 * 50:].any()
