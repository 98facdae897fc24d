"""A synchronized data-parallel training job: compute step, blocking collective, periodic checkpoint and eval.

Every host computes its step at its own pace (±1 %); the collective ends at the same instant on all
hosts, so ``comm_wait`` absorbs the difference and the next step starts together everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors.simulate import phases

STEP_S_MEDIAN = 1.45
STEP_S_RANGE = (1.0, 2.0)
COMM_S_RANGE = (0.15, 0.6)
CHECKPOINT_EVERY_S = 30 * 60
CHECKPOINT_S_RANGE = (10.0, 30.0)
EVAL_EVERY_S = 3 * 3600
EVAL_S_RANGE = (40.0, 90.0)
TOKENS_PER_GPU_STEP = 16 * 4096
KIND_NAMES = {phases.STEP: "step", phases.COMM: "comm_wait", phases.CKPT: "checkpoint", phases.EVAL: "eval"}


@dataclass
class HostEvents:
    """One host's events (all kinds, time order) and its power timeline."""

    step: np.ndarray
    kind: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    tokens: np.ndarray
    timeline: phases.Timeline


MICROBATCHES = 16
"""Micro-batches per step in a pipeline-parallel job (1F1B): the bubble is (pp − 1) / (16 + pp − 1)."""
HOST_JITTER_SD = 0.01
"""Relative sd of one host's compute time around the step's (the collective waits for the slowest)."""


def run_job(
    rng: np.random.Generator,
    hosts_gpus: list[int],
    until_s: float,
    host_jitter_sd: float = HOST_JITTER_SD,
    stage_offset_s: float = 0.0,
    pp: int = 1,
    microbatches: int = MICROBATCHES,
) -> list[HostEvents]:
    """Events from 00:00 UTC of day 0 (the job is already running) until ``until_s``, per host.

    ``stage_offset_s`` > 0 desynchronises the hosts: each runs the same schedule shifted by a fixed
    offset drawn uniformly in [0, ``stage_offset_s``) (as pipeline stages or data-parallel groups out of
    phase do); 0, the default, is the lock-step job. ``bench/paper_swings.py --training-sweep`` measures
    how both knobs change the cluster's 2 s swing.

    ``pp`` > 1: the hosts are pipeline stages in order (host h is stage h mod pp; data-parallel groups
    repeat the stages) under a 1F1B schedule of ``microbatches`` micro-batches: a step of length T is
    (microbatches + pp − 1) slots of one forward (1/3) and one backward (2/3); stage s starts computing
    s forwards after stage 0 and stops s backwards before it, waiting (``comm_wait``) meanwhile, and
    every stage meets the others at the data-parallel all-reduce after stage 0's last backward."""
    cycle_s = STEP_S_MEDIAN + np.mean(COMM_S_RANGE)
    n = int(until_s / cycle_s * 1.1) + 16
    step_s = np.clip(rng.lognormal(np.log(STEP_S_MEDIAN), 0.06, n), *STEP_S_RANGE)
    host_step_s = np.clip(step_s[None, :] * rng.normal(1.0, host_jitter_sd, (len(hosts_gpus), n)), *STEP_S_RANGE)
    comm_s = rng.uniform(*COMM_S_RANGE, n)
    sync_s = host_step_s.max(axis=0) + comm_s
    every_ckpt = max(1, round(CHECKPOINT_EVERY_S / cycle_s))
    every_eval = max(1, round(EVAL_EVERY_S / cycle_s))
    idx = np.arange(n)
    phase0 = int(rng.integers(0, every_ckpt))
    is_ckpt = (idx + phase0) % every_ckpt == every_ckpt - 1
    is_eval = (idx + phase0) % every_eval == every_eval - 1
    ckpt_s = np.where(is_ckpt, rng.uniform(*CHECKPOINT_S_RANGE, n), 0.0)
    eval_s = np.where(is_eval, rng.uniform(*EVAL_S_RANGE, n), 0.0)
    start = np.concatenate([[0.0], np.cumsum(sync_s + ckpt_s + eval_s)[:-1]]) - rng.uniform(0, cycle_s)
    keep = start < until_s
    first_step = int(rng.integers(10_000, 100_000))
    step_level = rng.uniform(*phases.STEP_W, (len(hosts_gpus), n)).astype(np.float32)
    comm_level = rng.uniform(*phases.COMM_W, (len(hosts_gpus), n)).astype(np.float32)
    eval_level = rng.uniform(*phases.EVAL_W, n).astype(np.float32)
    offset_s = rng.uniform(0.0, stage_offset_s, len(hosts_gpus)) if stage_offset_s > 0 else np.zeros(len(hosts_gpus))
    slot_s = host_step_s / (microbatches + pp - 1)

    out = []
    for h, n_gpus in enumerate(hosts_gpus):
        stage = h % pp
        s_cycle = start + offset_s[h]
        s_step = s_cycle + stage * slot_s[h] / 3
        s_comm = s_cycle + host_step_s[h] - stage * slot_s[h] * 2 / 3
        s_ckpt = s_cycle + sync_s
        s_eval = s_ckpt + ckpt_s
        e_eval = s_eval + eval_s
        parts = [
            (s_cycle, s_step, phases.COMM, comm_level[h], np.full(n, stage > 0)),  # the pipeline filling
            (s_step, s_comm, phases.STEP, step_level[h], np.ones(n, bool)),
            (s_comm, s_ckpt, phases.COMM, comm_level[h], np.ones(n, bool)),
            (s_ckpt, s_eval, phases.CKPT, np.full(n, phases.CKPT_W, np.float32), is_ckpt),
            (s_eval, e_eval, phases.EVAL, eval_level, is_eval),
        ]
        st, en, kd, lv, sp = [], [], [], [], []
        for s, e, k, level, mask in parts:
            m = mask & keep
            st.append(s[m])
            en.append(e[m])
            kd.append(np.full(int(m.sum()), k, np.uint8))
            lv.append(level[m])
            sp.append(idx[m])
        order_key = np.concatenate(st)
        order = np.argsort(order_key, kind="stable")
        start_s = order_key[order]
        kind = np.concatenate(kd)[order]
        step_no = np.concatenate(sp)[order] + first_step
        tokens = np.where(kind == phases.STEP, TOKENS_PER_GPU_STEP * n_gpus, 0)
        timeline = phases.Timeline(
            np.concatenate([[-1e9], start_s]),
            np.concatenate([[phases.STEP], kind]).astype(np.uint8),
            np.concatenate([[phases.STEP_W[0]], np.concatenate(lv)[order]]).astype(np.float32),
        )
        out.append(HostEvents(step_no, kind, start_s, np.concatenate(en)[order], tokens.astype(np.int64), timeline))
    return out
