"""The training job's physics: the bucketed gradient all-reduce overlapped with backward, the 1F1B
pipeline's bubbles, and what they do to a small job's 2 s power swing (collectors/simulate/training.py)."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.simulate import phases, power
from collectors.simulate.training import JobShape, job_shape, run_job


def _swing_pct(hosts, span_s: float) -> float:
    """Largest max − min of the hosts' summed 10 Hz power inside any 2 s window, % of their mean step power."""
    total = np.zeros(int(span_s * 10))
    for h, ev in enumerate(hosts):
        r = np.random.default_rng([7, h])
        rec, _ = power.sample_gpu(r, ev.timeline, (0.0, span_s), 0, 0.0, power.MEM_TRAINING_MIB, 1.0, 0.0)
        total += rec.power_w
    total = total[20:-20]
    win = np.lib.stride_tricks.sliding_window_view(total, 20)
    return float(100 * np.max(win.max(axis=1) - win.min(axis=1)) / (len(hosts) * np.mean(phases.STEP_W)))


def test_overlap_exposes_one_bucket_when_the_backward_hides_the_rest():
    """70B over tp 8 (8.75 G parameters per GPU, 219 buckets of 40 M) reduced over dp 2: 0.70 s back to
    back; a 0.9 s backward hides all but the last bucket (3.2 ms); without overlap all of it is exposed;
    a 31 ms backward (the last micro-batch of a deep pipeline) hides only 31 ms × (1 − 1/n)."""
    s = JobShape(70.0, tp=8, pp=1, dp=2)
    assert s.buckets == 219
    c = s.bucket_allreduce_s
    assert c == pytest.approx(2 * 1 * (10e-6 + 8.75e9 / 219 * 4 / 2 / 50e9))
    assert s.allreduce_s == pytest.approx(0.704, abs=0.001)
    assert s.exposed_comm_s(0.9) == pytest.approx(c)
    assert JobShape(70.0, tp=8, pp=1, dp=2, overlap=False).exposed_comm_s(0.9) == pytest.approx(s.allreduce_s)
    assert s.exposed_comm_s(0.031) == pytest.approx(s.allreduce_s - 0.031 * (1 - 1 / 219))
    assert job_shape({"tp": 8, "pp": 1}, 16) is None  # no params_b: the blocking collective
    assert job_shape({"params_b": 70, "tp": 8}, 16) == JobShape(70.0, 8, 1, 2)


def test_step_ends_with_the_exposed_allreduce_and_the_optimizer():
    """A two-host data-parallel job without gradient accumulation (one micro-batch a step): after each
    step's compute, the wait before the next step is the exposed all-reduce (one bucket) plus the optimizer
    step (no jitter: both hosts finish together); with 16 micro-batches only the last one's backward hides
    the reduction."""
    s = JobShape(70.0, tp=8, pp=1, dp=2)
    hosts = run_job(np.random.default_rng(3), [8, 8], 300.0, host_jitter_sd=0.0, microbatches=1, shape=s)
    ev = hosts[0]
    step = ev.kind == phases.STEP
    comm = ev.kind == phases.COMM
    durations = ev.end_s[comm] - ev.start_s[comm]
    np.testing.assert_allclose(durations, s.bucket_allreduce_s + s.optimizer_s, rtol=1e-6)
    np.testing.assert_allclose(hosts[1].start_s[hosts[1].kind == phases.STEP], ev.start_s[step])
    accumulated = run_job(np.random.default_rng(3), [8, 8], 300.0, host_jitter_sd=0.0, microbatches=16, shape=s)[0]
    step_s = accumulated.end_s[accumulated.kind == phases.STEP] - accumulated.start_s[accumulated.kind == phases.STEP]
    waits = accumulated.end_s[accumulated.kind == phases.COMM] - accumulated.start_s[accumulated.kind == phases.COMM]
    np.testing.assert_allclose(waits, s.exposed_comm_s(step_s / 16 * 2 / 3) + s.optimizer_s, rtol=1e-6)
    assert np.all(waits > 0.6)


def test_overlap_shrinks_a_small_jobs_swing_and_a_deep_pipeline_keeps_its_bubbles():
    """16 hosts of an 8B job (tp 8, dp 16: 1 G parameters per GPU in 25 buckets), one micro-batch a step.
    Blocking, every host drops to its wait level for the 158 ms all-reduce each step: the 2 s swing is most
    of the step power. Overlapped, only one bucket (6 ms) and the optimizer step (8 ms) are exposed, shorter
    than the power's 40 ms response: the swing falls (what is left: hosts waiting for the slowest one).
    A 4-stage 1F1B pipeline idles (pp − 1) / (m + pp − 1) of each step in its bubbles: lower mean power."""
    span = 240.0
    runs = {}
    for overlap in (False, True):
        shape = JobShape(8.0, tp=8, pp=1, dp=16, overlap=overlap)
        runs[overlap] = run_job(np.random.default_rng(5), [8] * 16, span + 30.0, microbatches=1, shape=shape)
        assert not np.isin(runs[overlap][0].kind, [phases.CKPT, phases.EVAL]).any()  # nor a checkpoint's dip
    sw_block, sw_overlap = _swing_pct(runs[False], span), _swing_pct(runs[True], span)
    assert sw_block > 80.0, sw_block
    assert sw_overlap < sw_block - 10.0, (sw_overlap, sw_block)

    def mean_w(hosts):
        return np.mean([np.mean(power.sample_gpu(np.random.default_rng(h), ev.timeline, (0.0, span), 0, 0.0,
                                                 power.MEM_TRAINING_MIB, 1.0, 0.0)[0].power_w) for h, ev in enumerate(hosts)])

    piped = run_job(np.random.default_rng(5), [8] * 4, span + 30.0, microbatches=4, shape=JobShape(8.0, 8, 4, 1))
    assert mean_w(piped) < 0.8 * mean_w(runs[True][:4])


def test_the_paper_job_is_a_3d_parallel_175b_with_the_stated_exposed_allreduce():
    """The paper fleet's job as the simulator reads it: 175B, tp 8 × pp 16 × dp 8, 1.37 G parameters per GPU in
    35 buckets, 196 ms reduced back to back, 166 ms exposed after the last micro-batch's 31 ms backward
    (docs/simulator.md, "The 3D-parallel job"), and a 10.6 ms optimizer step."""
    from collectors.inventory import parse_inventory
    from collectors.simulate.fleets import paper_fleet
    from collectors.simulate.simulator import workloads
    from collectors.simulate.training import MICROBATCHES, STEP_S_MEDIAN

    inv = parse_inventory(paper_fleet(1, 128), "paper")
    name, members = next(iter(workloads(inv)[1].items()))
    shape = job_shape(inv.workload_spec("job", name), sum(len(g) for _, g in members))
    assert shape == JobShape(175.0, 8, 16, 8)
    assert shape.buckets == 35
    assert shape.allreduce_s == pytest.approx(0.196, abs=0.001)
    backward = STEP_S_MEDIAN / (MICROBATCHES + 16 - 1) * 2 / 3
    assert float(shape.exposed_comm_s(backward)) == pytest.approx(0.166, abs=0.001)
    assert shape.optimizer_s == pytest.approx(0.0106, abs=0.0001)
