"""Serving engines, one per replica of an endpoint, behind a router: continuous or static batching.

Event-driven (one loop turn per arrival burst, prefill batch or completion, never per token).
Continuous batching (the default, vLLM without chunked prefill): prefill runs one batch at a time
and pauses decode; decode advances every running request one token per step. Static batching (an
endpoint's ``batching: static``; h200-capture-2's server): the requests waiting when the GPU frees
form one batch, prefilled together padded to its longest prompt, then decoded with every slot
stepping until its longest output is done; only then is the next batch formed. Step times and power levels come from the
model, its sharding and the GPU (:mod:`collectors.simulate.physics`); an endpoint without model keys
is the calibrated 8B decoder on its GPUs as one tensor-parallel group (capture 4).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from collectors.simulate import calibration, phases, physics
from collectors.simulate.arrivals import Arrivals

PREFILL_BUDGET_TOKENS = 16_384
MAX_RUNNING = 128
"""Continuous batching: prompt tokens per prefill batch and requests running at once (``max_batch``)."""
STATIC_BATCH_TOKENS = calibration.STATIC_BATCH_PADDED_TOKENS
"""Static batching: a batch takes waiting requests in arrival order while batch size × its longest
prompt stays within this (one request always goes in, however long)."""
BATCHING = ("continuous", "static")
PREFILL_OVERHEAD_S = calibration.PREFILL_OVERHEAD_S
"""The capture engine's fixed cost of a prefill batch (capture 4: 58.4 ms, while the board still reads
the level before; ``calibration.PREFILL_ONSET_S``); a replica pays its own engine's
(``physics.ServingModel.prefill_overhead_s``)."""
ERROR_SHARE = 0.006
CANCEL_SHARE = 0.015


@dataclass
class EngineResult:
    request_index: np.ndarray
    arrival_s: np.ndarray
    prefill_start_s: np.ndarray
    first_token_s: np.ndarray
    end_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    status: np.ndarray
    timelines: list[phases.Timeline]
    """One per replica; the endpoint's GPUs in order, tp × pp per replica."""
    gpus_per_replica: int = 1

    @property
    def timeline(self) -> phases.Timeline:
        return self.timelines[0]

    def timeline_of(self, k: int) -> phases.Timeline:
        """The timeline of the endpoint's ``k``-th GPU (counted over its hosts in inventory order)."""
        return self.timelines[min(k // self.gpus_per_replica, len(self.timelines) - 1)]


def _statuses(rng: np.random.Generator, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Errors and client cancellations stop a request part-way: fewer tokens are decoded."""
    u = rng.uniform(size=len(output))
    status = np.zeros(len(output), np.uint8)
    status[u < ERROR_SHARE + CANCEL_SHARE] = 2
    status[u < ERROR_SHARE] = 1
    cut = np.maximum(1, np.ceil(output * rng.uniform(size=len(output)))).astype(np.int32)
    return np.where(status > 0, np.minimum(cut, output), output).astype(np.int32), status


def route(arr: np.ndarray, prompt: np.ndarray, output: np.ndarray, model: physics.ServingModel, replicas: int) -> np.ndarray:
    """Join-shortest-queue on estimated work: each request goes to the replica with the least work left
    (prefill + output × a typical decode step, drained at one second per second). Deterministic, and
    close to least-outstanding-requests routing without simulating the replicas in lock-step."""
    if replicas <= 1:
        return np.zeros(len(arr), np.int32)
    step_s = model.decode_step_s(16)
    work = model.prefill_overhead_s + model.prefill_compute_s(1.0, 0.0) * prompt + output * step_s
    backlog = [0.0] * replicas
    last = 0.0
    out = np.empty(len(arr), np.int32)
    for i, (t, w) in enumerate(zip(arr.tolist(), work.tolist(), strict=True)):
        d = t - last
        last = t
        backlog = [max(0.0, b - d) for b in backlog]
        k = min(range(replicas), key=backlog.__getitem__)
        backlog[k] += w
        out[i] = k
    return out


def run_engine(rng: np.random.Generator, arrivals: Arrivals, n_gpus: int, errors: bool = True,
               model: physics.ServingModel | None = None, batching: str = "continuous",
               max_batch: int | None = None) -> EngineResult:
    """``errors=False``: every request completes its output (replaying a measured run).
    ``model``: the replica's physics (default: the calibrated 8B on ``n_gpus`` H200s as one group).
    ``batching``: ``continuous`` or ``static``; ``max_batch``: the most requests running at once
    (continuous) or in one batch (static), default ``MAX_RUNNING``."""
    if batching not in BATCHING:
        raise ValueError(f"batching must be one of {', '.join(BATCHING)} (got {batching!r})")
    max_running = int(max_batch or MAX_RUNNING)
    if model is None:
        model = physics.ServingModel(physics.REFERENCE.gpu, tp=max(1, n_gpus))
    arr = np.asarray(arrivals.offset_s, dtype=np.float64)
    prompt = np.asarray(arrivals.prompt_tokens, dtype=np.int64)
    if errors:
        output, status = _statuses(rng, np.asarray(arrivals.output_tokens, dtype=np.int32))
    else:
        output, status = np.asarray(arrivals.output_tokens, dtype=np.int32), np.zeros(len(arr), np.uint8)
    n = len(arr)
    per_replica = model.tp * model.pp
    replicas = max(1, n_gpus // per_replica)
    which = route(arr, prompt, output, model, replicas)
    pstart = np.zeros(n)
    first = np.zeros(n)
    end = np.zeros(n)
    timelines = []
    for k in range(replicas):
        idx = np.flatnonzero(which == k)
        p, f, e, tl = _replica(rng, arr[idx], prompt[idx], output[idx], model, batching == "static", max_running)
        pstart[idx], first[idx], end[idx] = p, f, e
        timelines.append(tl)
    return EngineResult(np.arange(n), arr, pstart, first, end, prompt.astype(np.int32), output, status, timelines, per_replica)


def _replica(rng: np.random.Generator, arr: np.ndarray, prompt: np.ndarray, output: np.ndarray,
             model: physics.ServingModel, static: bool = False,
             max_running: int = MAX_RUNNING) -> tuple[np.ndarray, np.ndarray, np.ndarray, phases.Timeline]:
    gpu = model.gpu
    n = len(arr)
    pstart = [0.0] * n
    first = [0.0] * n
    end = [0.0] * n
    arr_l = arr.tolist()
    prompt_l = prompt.tolist()
    out_l = output.tolist()
    seg_t, seg_k, seg_x = [-1e9], [phases.LOADED], [0.0]
    # per prefill batch: its level at full clocks, drawn in order (one stream per replica)
    plateau = gpu.map_w(phases.prefill_w(rng, max(n, 1)))
    decode_cache: dict[int, tuple[float, float]] = {}

    def segment(t: float, kind: int, x: float) -> None:
        if seg_k[-1] == kind and seg_x[-1] == x:
            return
        seg_t.append(t)
        seg_k.append(kind)
        seg_x.append(x)

    def decode(running: int) -> tuple[float, float]:
        """(step time, level) at ``running``, slowed and held to the limit when capped."""
        if running not in decode_cache:
            move, fixed = model.decode_parts_s(running)
            if model.engine.power_from_utilisation:
                level = physics.decode_level_for_mean(model.decode_power_w(running, move + fixed), gpu.ceiling_w)
            else:
                busy = model.decode_busy_ratio(running)
                level = gpu.map_w(phases.LOADED_W + (float(phases.decode_w(running)) - phases.LOADED_W) * busy)
            level = min(level, gpu.map_w(calibration.PREFILL_PLATEAU_W))
            c = gpu.clock(level)
            decode_cache[running] = (move / c ** physics.MEMORY_CLOCK_SENSITIVITY + fixed, gpu.capped_w(level, c))
        return decode_cache[running]

    heap: list[tuple[int, int]] = []
    waiting: deque[int] = deque()
    steps = 0
    now = arr_l[0] if n else 0.0
    nxt = 0
    batch_no = 0
    levels: list[float] = []

    def prefill(tokens: float, sq: float) -> float:
        """Writes a prefill batch's segments from ``now``; its duration."""
        level = float(plateau[batch_no % len(plateau)])
        c = gpu.clock(level)
        dur = model.prefill_overhead_s + model.prefill_compute_s(tokens, sq) / c
        # Until the board shows the prefill (PREFILL_ONSET_S: the engine's host-side work) the GPU
        # stays where it was (a decode level, else loaded: capture 4 reads ~150-200 W there, no
        # spikes); then its compute, whose power rises within a driver sample (phases.PREFILL_EDGE_S).
        if seg_k[-1] != phases.DECODE:
            segment(now, phases.LOADED, 0.0)
        seg_t.append(now + min(calibration.PREFILL_ONSET_S, dur))
        seg_k.append(phases.PREFILL)
        seg_x.append(float(tokens))
        levels.append(gpu.capped_w(level, c))
        return dur

    while static and nxt < n:
        if arr_l[nxt] > now:
            segment(now, phases.LOADED, 0.0)
            now = arr_l[nxt]
        batch, longest = [nxt], prompt_l[nxt]
        nxt += 1
        while nxt < n and arr_l[nxt] <= now and len(batch) < max_running:
            if (len(batch) + 1) * max(longest, prompt_l[nxt]) > STATIC_BATCH_TOKENS:
                break
            longest = max(longest, prompt_l[nxt])
            batch.append(nxt)
            nxt += 1
        size = len(batch)
        dur = prefill(size * longest, size * longest * longest)  # padded: every row as long as the longest
        batch_no += 1
        for j in batch:
            pstart[j] = now
        now += dur
        step_s = decode(size)[0]  # finished rows keep their slot: every step is a step of the whole batch
        for j in batch:
            first[j] = now
            end[j] = now + (max(out_l[j], 1) - 1) * step_s
        steps = max(out_l[j] for j in batch) - 1
        if steps > 0:
            segment(now, phases.DECODE, float(size))
            now += steps * step_s
    if static:
        segment(now, phases.LOADED, 0.0)

    while not static and (nxt < n or waiting or heap):
        while nxt < n and arr_l[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if waiting and len(heap) < max_running:
            batch, tokens, sq = [], 0, 0
            while waiting and len(heap) + len(batch) < max_running:
                j = waiting[0]
                if batch and tokens + prompt_l[j] > PREFILL_BUDGET_TOKENS:
                    break
                waiting.popleft()
                batch.append(j)
                tokens += prompt_l[j]
                sq += prompt_l[j] * prompt_l[j]
            dur = prefill(tokens, sq)
            batch_no += 1
            for j in batch:
                pstart[j] = now
            now += dur
            for j in batch:
                first[j] = now
                if out_l[j] <= 1:
                    end[j] = now
                else:
                    heapq.heappush(heap, (steps + out_l[j] - 1, j))
            continue
        if heap:
            running = len(heap)
            step_s, _ = decode(running)
            segment(now, phases.DECODE, float(running))
            done_at = heap[0][0]
            t_done = now + (done_at - steps) * step_s
            t_arr = arr_l[nxt] if nxt < n and running < max_running else math.inf
            if t_arr < t_done:
                k = max(1, math.ceil((t_arr - now) / step_s))
                steps += k
                now += k * step_s
            else:
                steps = done_at
                now = t_done
                while heap and heap[0][0] <= steps:
                    end[heapq.heappop(heap)[1]] = now
            continue
        segment(now, phases.LOADED, 0.0)
        if nxt >= n:
            break
        now = max(now, arr_l[nxt])

    seg_t_a = np.array(seg_t)
    seg_k_a = np.array(seg_k, np.uint8)
    seg_x_a = np.array(seg_x)
    level = np.full(len(seg_t_a), gpu.map_w(phases.LOADED_W), np.float64)
    is_pre = seg_k_a == phases.PREFILL
    is_dec = seg_k_a == phases.DECODE
    level[is_pre] = levels
    level[is_dec] = [decode(int(r))[1] for r in seg_x_a[is_dec]]
    level[is_dec] *= rng.normal(1.0, 0.03, int(is_dec.sum()))
    timeline = phases.Timeline(seg_t_a, seg_k_a, level.astype(np.float32))
    return np.array(pstart), np.array(first), np.array(end), timeline
