"""A small continuous-batching serving engine, one per endpoint (its GPUs are one tensor-parallel group).

Event-driven (one loop turn per arrival burst, prefill batch or completion, never per token):
prefill runs one batch at a time and pauses decode, as in vLLM without chunked prefill; decode
advances every running request one token per step, the step time growing with the batch.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from collectors.simulate import calibration, phases
from collectors.simulate.arrivals import Arrivals

PREFILL_BUDGET_TOKENS = 16_384
MAX_RUNNING = 128
PREFILL_OVERHEAD_S = calibration.PREFILL_OVERHEAD_S
PREFILL_S_PER_TOKEN_GPU = calibration.PREFILL_S_PER_TOKEN
"""Per GPU (capture 4: an 8B model on one H200): 1,500 tokens take ~90 ms; n GPUs divide the per-token part."""
DECODE_STEP_S = calibration.DECODE_STEP_S
DECODE_STEP_S_PER_SEQ = calibration.DECODE_STEP_S_PER_SEQ
"""Step time 52 ms at batch 1, ~57 ms at 32, ~72 ms at 128 running requests."""
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
    timeline: phases.Timeline


def _statuses(rng: np.random.Generator, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Errors and client cancellations stop a request part-way: fewer tokens are decoded."""
    u = rng.uniform(size=len(output))
    status = np.zeros(len(output), np.uint8)
    status[u < ERROR_SHARE + CANCEL_SHARE] = 2
    status[u < ERROR_SHARE] = 1
    cut = np.maximum(1, np.ceil(output * rng.uniform(size=len(output)))).astype(np.int32)
    return np.where(status > 0, np.minimum(cut, output), output).astype(np.int32), status


def run_engine(rng: np.random.Generator, arrivals: Arrivals, n_gpus: int, errors: bool = True) -> EngineResult:
    """``errors=False``: every request completes its output (replaying a measured run)."""
    arr = np.asarray(arrivals.offset_s, dtype=np.float64)
    prompt = np.asarray(arrivals.prompt_tokens, dtype=np.int64)
    if errors:
        output, status = _statuses(rng, np.asarray(arrivals.output_tokens, dtype=np.int32))
    else:
        output, status = np.asarray(arrivals.output_tokens, dtype=np.int32), np.zeros(len(arr), np.uint8)
    n = len(arr)
    s_per_token = PREFILL_S_PER_TOKEN_GPU / n_gpus
    pstart = [0.0] * n
    first = [0.0] * n
    end = [0.0] * n
    arr_l = arr.tolist()
    prompt_l = prompt.tolist()
    out_l = output.tolist()
    seg_t, seg_k, seg_x = [-1e9], [phases.LOADED], [0.0]

    def segment(t: float, kind: int, x: float) -> None:
        if seg_k[-1] == kind and seg_x[-1] == x:
            return
        seg_t.append(t)
        seg_k.append(kind)
        seg_x.append(x)

    heap: list[tuple[int, int]] = []
    waiting: deque[int] = deque()
    steps = 0
    now = arr_l[0] if n else 0.0
    nxt = 0
    while nxt < n or waiting or heap:
        while nxt < n and arr_l[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if waiting and len(heap) < MAX_RUNNING:
            batch, tokens = [], 0
            while waiting and len(heap) + len(batch) < MAX_RUNNING:
                j = waiting[0]
                if batch and tokens + prompt_l[j] > PREFILL_BUDGET_TOKENS:
                    break
                waiting.popleft()
                batch.append(j)
                tokens += prompt_l[j]
            dur = PREFILL_OVERHEAD_S + s_per_token * tokens
            segment(now, phases.PREFILL, -1.0)  # the onset: power still at the level before
            segment(now + min(calibration.PREFILL_ONSET_S, dur), phases.PREFILL, float(tokens))
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
            step_s = DECODE_STEP_S + DECODE_STEP_S_PER_SEQ * running
            segment(now, phases.DECODE, float(running))
            done_at = heap[0][0]
            t_done = now + (done_at - steps) * step_s
            t_arr = arr_l[nxt] if nxt < n and running < MAX_RUNNING else math.inf
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
    level = np.full(len(seg_t_a), phases.LOADED_W, np.float64)
    is_pre = seg_k_a == phases.PREFILL
    is_dec = seg_k_a == phases.DECODE
    level[is_pre] = phases.prefill_w(rng, int(is_pre.sum()))
    level[is_dec] = phases.decode_w(seg_x_a[is_dec])
    level[is_dec] *= rng.normal(1.0, 0.03, int(is_dec.sum()))
    onset = np.flatnonzero(is_pre & (seg_x_a < 0))
    level[onset] = level[np.maximum(onset - 1, 0)]  # before the onset delay the board reads the previous level
    timeline = phases.Timeline(seg_t_a, seg_k_a, level.astype(np.float32))
    return EngineResult(
        np.arange(n),
        arr,
        np.array(pstart),
        np.array(first),
        np.array(end),
        prompt.astype(np.int32),
        output,
        status,
        timeline,
    )
