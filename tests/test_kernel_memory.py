"""The series kernels' memory: what one GPU-day (~5 M samples on capture 4's collector files) costs
them beyond their inputs sets the series pass's peak RSS, so each is held to a bound in bytes per
sample (tracemalloc counts numpy's arrays). The values are bit-equal to the wider forms they
replaced (tests/test_power_kernels.py, tests/test_energy_seconds.py)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest

from pipeline import kernels
from pipeline.series.energy import energy_seconds

N = 1_000_000


@pytest.fixture(scope="module")
def trace() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 50 Hz GPU trace of N samples with jittered timestamps, one source."""
    rng = np.random.default_rng(0)
    t = 1_764_720_000 * 10**9 + np.arange(N, dtype=np.int64) * 20_000_000 + rng.integers(0, 1000, N)
    return t, (300 + 100 * rng.random(N)).astype(np.float32), np.zeros(N, np.uint8)


def bytes_per_sample(f: Callable[[], object]) -> float:
    """Peak of the memory ``f`` allocates (its result included), per sample."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        f()
        return (tracemalloc.get_traced_memory()[1] - base) / N
    finally:
        tracemalloc.stop()


def test_energy_seconds_holds_no_copy_of_every_sample_beyond_the_second_keys(trace):
    t, p, rank = trace
    curve = kernels.energy_curve(t, p, rank)
    assert bytes_per_sample(lambda: energy_seconds(t, p, rank, "h", 0, curve=curve)) < 40  # was 61


def test_seconds_1s_rounds_its_energy_terms_in_place(trace):
    t, p, rank = trace
    assert bytes_per_sample(lambda: kernels.seconds_1s(t, p, rank, np.zeros(N, bool))) < 64  # was 85


def test_energy_curve_peaks_near_its_own_result(trace):
    t, p, rank = trace  # the result alone: 33 B a sample (t, power, energy, first, linked); no next_t, next_w
    assert bytes_per_sample(lambda: kernels.energy_curve(t, p, rank)) < 44  # was 66, then 56


def test_curve_from_the_cache_builds_no_column_it_is_not_asked_for(trace):
    """A curve taken from the run's cache (curve._curve) holds the cached columns as they are; the
    power in double and the next sample's instant and power are built where read (swing_stats reads
    neither: at 8 GPUs x 24 h they were ~120 MB a GPU beside the host's slots)."""
    from pipeline.phases import curve

    t, p, rank = trace
    k = kernels.energy_curve(t, p, rank)
    linked, source_id, is_average = k["linked"], np.zeros(N, np.uint8), np.zeros(N, bool)
    assert bytes_per_sample(lambda: curve._curve(k["t_ns"], p, k["energy_j"], linked, source_id, is_average, ["nvml"], None)) < 2
    c = curve._curve(k["t_ns"], p, k["energy_j"], linked, source_id, is_average, ["nvml"], None)
    pw = p.astype(np.float64)  # read, each is the eager column it replaced
    assert np.array_equal(c.power_w, pw)
    assert np.array_equal(c.next_t_ns, np.where(linked, np.r_[k["t_ns"][1:], 0], 0))
    assert np.array_equal(c.next_w, np.where(linked, np.append(pw[1:], np.nan), np.nan), equal_nan=True)
    assert np.array_equal(c.next_gaps_ns(c.mine), (c.next_t_ns - c.t_ns)[c.mine & c.has_next])
    fresh = curve._curve(k["t_ns"], p, k["energy_j"], linked, source_id, is_average, ["nvml"], None)
    assert bytes_per_sample(lambda: fresh.next_gaps_ns(fresh.mine)) < 20  # the spacing, no next_t_ns built
    c.has_next[-1] = True  # a last row marked linked: its next instant is 0, as the eager column had it
    assert c.next_gaps_ns(c.mine)[-1] == -c.t_ns[-1]


@pytest.mark.parametrize("trailing", [True, False])
def test_power_only_detector_takes_sample_windows_at_run_bounds_only(trace, trailing):
    """phase_segments' detector (power_detect.detect_gpu) on one GPU's samples: each sample's window
    bounds are computed where a run starts or ends (or before a high sample), not as three
    day-sized int64 arrays."""
    from pipeline.phases import power_detect

    t, p, _ = trace
    w = p.astype(np.float64)
    w[::20] = 650.0  # prefill-high samples, so the onset lead walks back from them
    assert bytes_per_sample(lambda: power_detect.detect_gpu(0, t, w, 700.0, 60_000_000, trailing)) < 16  # was 28 / 36
