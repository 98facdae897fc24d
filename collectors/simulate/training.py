"""A synchronous training job (tp × pp × dp): 1F1B pipeline stages, the gradient all-reduce, periodic checkpoint and eval.

Every host computes its step at its own pace (±1 %); the step's collective ends at the same instant on
all hosts, so ``comm_wait`` absorbs the difference and the next step starts together everywhere.
A job whose size is known (``params_b``) reduces its gradients in buckets overlapped with the last
micro-batch's backward (as PyTorch DDP and Megatron-LM do): only what the backward cannot hide is
exposed, followed by the optimizer step. A job without ``params_b`` keeps a blocking collective of
``COMM_S_RANGE`` (the length the captures cannot measure: they ran on one GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collectors.gpu_specs import DEFAULT
from collectors.simulate import phases
from collectors.simulate.power import RAMP_S

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
BUCKET_PARAMS = 40e6
"""Gradients per all-reduce bucket: Megatron-LM's default (max(40 M, 1 M × dp) parameters; PyTorch
DDP's is 25 MB)."""
GRAD_BYTES_PER_PARAM = 4.0
"""Gradients are accumulated over the micro-batches and reduced in fp32 (Megatron-LM's default)."""
DP_LINK_BYTES_S = 50e9
"""One direction of the data-parallel fabric per GPU: one 400 Gb/s InfiniBand NIC per GPU (DGX H100/H200)."""
DP_HOP_LATENCY_S = 10e-6
"""Per ring hop of an inter-host all-reduce (assumed: NCCL over InfiniBand)."""
OPTIMIZER_BYTES_PER_PARAM = 28.0
"""Adam in mixed precision reads fp32 weights, gradients and two moments (16 B) and writes the weights,
the moments and the bf16 copy (14 B, less the 2 B the copy replaces): a memory-bound pass."""
OPTIMIZER_BW_EFFICIENCY = 0.75
"""Achieved / peak HBM bandwidth of that pass (the decode efficiency of physics.py)."""
OPTIMIZER_W = 450.0
"""The optimizer step's level on the 700 W H200: memory-bound at full bandwidth, between decode
(~200 W at a small batch) and a training step (~707 W). Assumed: not in the captures."""


def allreduce_s(nbytes: float, dp: int, link_bytes_s: float = DP_LINK_BYTES_S) -> float:
    """A ring all-reduce of ``nbytes`` per GPU over ``dp`` ranks: 2 (dp − 1) / dp of the bytes each way."""
    if dp <= 1:
        return 0.0
    return 2.0 * (dp - 1) * (DP_HOP_LATENCY_S + nbytes / dp / link_bytes_s)


@dataclass(frozen=True)
class JobShape:
    """What sets the end of a step: the parameters each GPU holds (params / (tp × pp)) and the
    data-parallel degree its gradients are reduced over."""

    params_b: float
    tp: int = 1
    pp: int = 1
    dp: int = 1
    overlap: bool = True
    bucket_params: float = BUCKET_PARAMS
    link_bytes_s: float = DP_LINK_BYTES_S

    @property
    def params_per_gpu(self) -> float:
        return self.params_b * 1e9 / (self.tp * self.pp)

    @property
    def buckets(self) -> int:
        return max(1, math.ceil(self.params_per_gpu / self.bucket_params))

    @property
    def allreduce_s(self) -> float:
        """All the GPU's gradients reduced back to back (what a blocking all-reduce costs)."""
        return self.buckets * self.bucket_allreduce_s

    @property
    def bucket_allreduce_s(self) -> float:
        return allreduce_s(self.params_per_gpu / self.buckets * GRAD_BYTES_PER_PARAM, self.dp, self.link_bytes_s)

    def exposed_comm_s(self, backward_s):
        """The all-reduce time left after the last micro-batch's backward (``backward_s`` on this stage).

        With overlap, bucket k (of n) is ready k/n of the way through that backward and the buckets go
        over the link one after the other: the last finishes max(b/n + n·c, b + c) after the backward
        starts (c: one bucket's all-reduce), so max(c, n·c − b + b/n) is exposed: one bucket when the
        backward hides the rest. Without overlap, all n·c."""
        n, c = self.buckets, self.bucket_allreduce_s
        if not self.overlap:
            return n * c + 0.0 * np.asarray(backward_s)
        return np.maximum(c, n * c - np.asarray(backward_s) * (1 - 1 / n))

    @property
    def optimizer_s(self) -> float:
        """Adam over the GPU's parameters (not sharded over dp), memory-bound on the H200's HBM."""
        return self.params_per_gpu * OPTIMIZER_BYTES_PER_PARAM / (DEFAULT.mem_bytes_s * OPTIMIZER_BW_EFFICIENCY)


def job_shape(spec: dict, gpus: int) -> JobShape | None:
    """The job's shape from its inventory keys; None without ``params_b`` (the blocking collective)."""
    if not spec.get("params_b"):
        return None
    tp, pp = int(spec.get("tp") or 1), int(spec.get("pp") or 1)
    dp = int(spec.get("dp") or max(1, gpus // (tp * pp)))
    return JobShape(float(spec["params_b"]), tp, pp, dp)


def run_job(
    rng: np.random.Generator,
    hosts_gpus: list[int],
    until_s: float,
    host_jitter_sd: float = HOST_JITTER_SD,
    stage_offset_s: float = 0.0,
    pp: int = 1,
    microbatches: int = MICROBATCHES,
    shape: JobShape | None = None,
) -> list[HostEvents]:
    """Events from 00:00 UTC of day 0 (the job is already running) until ``until_s``, per host.

    ``stage_offset_s`` > 0 desynchronises the hosts: each runs the same schedule shifted by a fixed
    offset drawn uniformly in [0, ``stage_offset_s``) (as data-parallel groups out of phase would);
    0, the default, is the synchronous job. ``bench/paper_swings.py --training-sweep`` measures it.

    ``pp`` > 1 (``shape.pp`` when a shape is given): the hosts are pipeline stages in order (host h is
    stage h mod pp; data-parallel groups repeat the stages) under a 1F1B schedule of ``microbatches``
    (≥ pp) micro-batches: a step of length T is (microbatches + pp − 1) slots of one forward f (1/3)
    and one backward b (2/3). Stage s waits s·f for its first forward, runs pp − s forwards, waits
    (pp − 1 − s)·b for the first backward to come back, alternates backward and forward, runs its last
    pp − 1 − s backwards each after an f gap (drawn at the duty cycle's mean level), and stops s·b before
    stage 0. Then its gradients: with a ``shape``, the exposed part of the bucketed all-reduce
    (:meth:`JobShape.exposed_comm_s`) and the optimizer step; without, a blocking collective of
    ``COMM_S_RANGE``. Every stage then waits for the next step to reach it (``comm_wait``)."""
    if shape is not None:
        pp = shape.pp
    if pp > 1 and microbatches < pp:
        raise ValueError(f"1F1B needs at least pp micro-batches per step (pp {pp}, micro-batches {microbatches})")
    cycle_s = STEP_S_MEDIAN + np.mean(COMM_S_RANGE)
    n = int(until_s / cycle_s * 1.1) + 16
    step_s = np.clip(rng.lognormal(np.log(STEP_S_MEDIAN), 0.06, n), *STEP_S_RANGE)
    host_step_s = np.clip(step_s[None, :] * rng.normal(1.0, host_jitter_sd, (len(hosts_gpus), n)), *STEP_S_RANGE)
    comm_s = rng.uniform(*COMM_S_RANGE, n)
    slot_s = host_step_s / (microbatches + pp - 1)
    if shape is None:
        exposed_s = np.zeros_like(host_step_s)
        opt_s = 0.0
    else:
        exposed_s = shape.exposed_comm_s(slot_s * 2 / 3)
        opt_s = shape.optimizer_s
        comm_s = (exposed_s + opt_s + host_step_s).max(axis=0) - host_step_s.max(axis=0)
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

    out = []
    for h, n_gpus in enumerate(hosts_gpus):
        stage = h % pp
        fwd, bwd = slot_s[h] / 3, slot_s[h] * 2 / 3
        s_cycle = start + offset_s[h]
        s_step = s_cycle + stage * fwd
        s_comm = s_cycle + host_step_s[h] - stage * bwd
        s_ckpt = s_cycle + sync_s
        s_eval = s_ckpt + ckpt_s
        e_eval = s_eval + eval_s
        comm, step, ckpt = comm_level[h], step_level[h], np.full(n, phases.CKPT_W, np.float32)
        events = [
            (s_cycle, s_step, phases.COMM, comm, np.full(n, stage > 0)),  # the pipeline filling
            (s_step, s_comm, phases.STEP, step, np.ones(n, bool)),
            (s_comm, s_ckpt, phases.COMM, comm, np.ones(n, bool)),
            (s_ckpt, s_eval, phases.CKPT, ckpt, is_ckpt),
            (s_eval, e_eval, phases.EVAL, eval_level, is_eval),
        ]
        power = list(events)
        if pp > 1 or shape is not None:
            warm_end = s_cycle + pp * fwd  # every stage's last warm-up forward ends here
            steady = warm_end + (pp - 1 - stage) * bwd
            cool = s_cycle + microbatches * slot_s[h] + stage * fwd
            e_opt = s_comm + exposed_s[h]
            duty = (comm + (step - comm) * 2 / 3).astype(np.float32)
            opt = np.full(n, OPTIMIZER_W, np.float32)
            power = [
                events[0],
                (s_step, warm_end, phases.STEP, step, np.ones(n, bool)),
                (warm_end, steady, phases.COMM, comm, steady > warm_end + EPS_S),  # waiting for the first backward
                (steady, cool, phases.STEP, step, steady > warm_end + EPS_S),
                (cool, s_comm, phases.STEP, duty, s_comm > cool + EPS_S),  # backwards with f gaps between them
                (s_comm, e_opt, phases.COMM, comm, e_opt > s_comm + EPS_S),  # the exposed all-reduce
                (e_opt, e_opt + opt_s, phases.STEP, opt, np.full(n, opt_s > EPS_S)),
                (e_opt + opt_s, s_ckpt, phases.COMM, comm, s_ckpt > e_opt + opt_s + EPS_S),
                *events[3:],
            ]
        ev_start, ev_kind, _, ev_step, ev_end = _merge(events, keep, idx)
        start_s, kind, level_w, _, _ = _merge(power, keep, idx)
        if power is not events:
            level_w = _reached_w(start_s, level_w)
        tokens = np.where(ev_kind == phases.STEP, TOKENS_PER_GPU_STEP * n_gpus, 0)
        timeline = phases.Timeline(
            np.concatenate([[-1e9], start_s]),
            np.concatenate([[phases.STEP], kind]).astype(np.uint8),
            np.concatenate([[phases.STEP_W[0]], level_w]).astype(np.float32),
        )
        out.append(HostEvents(ev_step + first_step, ev_kind, ev_start, ev_end, tokens.astype(np.int64), timeline))
    return out


def _reached_w(start_s: np.ndarray, level_w: np.ndarray) -> np.ndarray:
    """A segment shorter than the power's response (``power.RAMP_S``) is drawn at the level the power
    reaches in it, ramping from the previous one: a 6 ms exposed all-reduce between a step and the
    optimizer dips the board power by 6/40 of the way, not to the wait's level."""
    if len(level_w) == 0:
        return level_w
    frac = np.minimum(np.diff(start_s, append=np.inf) / RAMP_S, 1.0)
    short = frac < 1.0
    reached = level_w.astype(np.float64)
    for _ in range(4):  # runs of up to four short segments (a step's end has at most three)
        prev = np.concatenate([[reached[0]], reached[:-1]])
        reached = np.where(short, prev + (level_w - prev) * frac, level_w)
    return reached.astype(np.float32)


EPS_S = 1e-6
"""Shorter segments are left out (rounding between two ways of summing the same times)."""


def _merge(parts: list, keep: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """Segments (start, end, kind, level, mask) of every step, in time order: start, kind, level, step, end."""
    st, en, kd, lv, sp = [], [], [], [], []
    for s, e, k, level, mask in parts:
        m = mask & keep
        st.append(s[m])
        en.append(e[m])
        kd.append(np.full(int(m.sum()), k, np.uint8))
        lv.append(level[m])
        sp.append(idx[m])
    start = np.concatenate(st)
    order = np.argsort(start, kind="stable")
    return start[order], np.concatenate(kd)[order], np.concatenate(lv)[order], np.concatenate(sp)[order], np.concatenate(en)[order]
