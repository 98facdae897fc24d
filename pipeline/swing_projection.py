"""Swing at scale: the 2 s swing of the sum of k of an entity's members (inference endpoints, or a
training job's hosts), for k from 1 to the members observed and beyond, from the day's own series.

Up to the members observed, k is a random subset of them at their own times (what the fleet did).
Beyond, inference adds copies of observed endpoints, each shifted by a random 0–30 min either way
(same time of day: their bursts independent, their daily load alike), wrapping around the observed
span; a training job adds copies of its hosts without a shift (a synchronous job stays in step at
scale). Each draw is one random order of members and shifts; the band is the draws' min–max.
Seeded from the day and entity, so a rebuilt day gives the same rows (docs/metrics.md)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np

WINDOW_SLOTS = 20
"""2 s on the 100 ms grid."""
MAX_SHIFT_SLOTS = 18_000
"""±30 min at 100 ms."""
DRAWS = 8
MAX_MEMBERS_READ = 64
"""Cap on series read per entity (a seeded choice when there are more)."""
MAX_K = 2_048
"""Cap on members summed (the cost is draws × k × slots additions)."""
PUBLISHED = {"inference": (2_048, 9.0), "training": (1_024, 37.5)}
"""Role → (GPUs, max 2 s swing % of provisioned): the published fleet figures, at the size of the
cluster they are quoted for (docs/simulator.md's `paper` fleet: 2,048 inference and 1,024 training GPUs)."""


def seed_for(*parts: object) -> int:
    """A stable seed from the day and the entity (Python's hash() is salted per process)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def _window_extreme(x: np.ndarray, slots: int, fn) -> np.ndarray:
    """fn (np.maximum/np.minimum) over every window of ``slots`` consecutive values, by doubling."""
    out, width = x, 1
    while width * 2 <= slots:
        out = fn(out[:-width], out[width:])
        width *= 2
    if width < slots:
        rest = slots - width
        out = fn(out[:-rest], out[rest:])
    return out


def window_swings(total: np.ndarray, slots: int = WINDOW_SLOTS) -> np.ndarray:
    """max − min of every ``slots``-long window (sliding by one slot); NaN where a slot is missing."""
    if total.size < slots:
        return np.empty(0)
    return _window_extreme(total, slots, np.maximum) - _window_extreme(total, slots, np.minimum)


def k_grid(observed: int, gpus_per_member: float, published_gpus: int, max_k: int = MAX_K) -> tuple[list[int], int]:
    """Powers of two up to the published size, the observed count and the published size itself
    (in members: ceil(published GPUs ÷ GPUs per member)), capped at ``max_k``."""
    k_pub = min(max_k, max(1, int(np.ceil(published_gpus / gpus_per_member))))
    ks = {observed, k_pub}
    k = 1
    while k < k_pub:
        ks.add(k)
        k *= 2
    return sorted(x for x in ks if 1 <= x <= max_k), k_pub


def observed_span(series: np.ndarray) -> np.ndarray:
    """Cut the members' series (members × slots) to the slots from the first any reports to the last."""
    seen = np.flatnonzero(~np.all(np.isnan(series), axis=0))
    return series[:, seen[0]: seen[-1] + 1] if seen.size else series[:, :0]


def project(series: np.ndarray, provisioned_w: np.ndarray, gpus: np.ndarray, ks: Iterable[int], *,
            shift: bool, seed: int, draws: int = DRAWS, max_shift_slots: int = MAX_SHIFT_SLOTS,
            window_slots: int = WINDOW_SLOTS) -> list[dict]:
    """Per k: the 2 s swing (max and p99 over windows, % of the summed members' provisioned power)
    of the sum of k members, median and min–max over ``draws`` draws; ``gpus``: the k members'
    GPUs in the draw at the lower median of the draws' counts (``gpus_low``–``gpus_high``: their
    range, one value when the members are alike).

    ``series``: members × slots on the 100 ms grid (W, NaN where the member is incomplete), already
    cut to the observed span; ``provisioned_w``/``gpus``: each member's share of its hosts'
    provisioned power and its GPUs."""
    n, length = series.shape
    ks = sorted(set(ks))
    if n == 0 or length < window_slots or not ks:
        return []
    series = series.astype(np.float32, copy=False)
    per_k: dict[int, list[tuple[float, float, float, float]]] = {k: [] for k in ks}
    for d in range(draws):
        rng = np.random.default_rng([seed, d])
        order = rng.permutation(n)
        acc = np.zeros(length, dtype=np.float32)
        prov = 0.0
        g = 0
        for j in range(1, ks[-1] + 1):
            if j <= n:
                idx, s = int(order[j - 1]), 0
            else:
                idx = int(rng.integers(n))
                s = int(rng.integers(-max_shift_slots, max_shift_slots + 1)) % length if shift else 0
            if s:  # acc(t) += x(t − s), wrapping around the span
                acc[s:] += series[idx, : length - s]
                acc[:s] += series[idx, length - s:]
            else:
                acc += series[idx]
            prov += float(provisioned_w[idx])
            g += int(gpus[idx])
            if j in per_k:
                sw = window_swings(acc, window_slots)
                sw = sw[~np.isnan(sw)]
                if sw.size:
                    per_k[j].append((100 * float(sw.max()) / prov, 100 * float(np.percentile(sw, 99)) / prov, prov, g))
    rows = []
    for k, vals in per_k.items():
        if not vals:
            continue
        a = np.array(vals)
        counts = a[:, 3].astype(np.int64)
        rows.append({
            "members": k,
            # a count one draw had (the lower median), not a mean: members may differ in size
            "gpus": int(np.percentile(counts, 50, method="lower")),
            "gpus_low": int(counts.min()),
            "gpus_high": int(counts.max()),
            "provisioned_w": float(a[:, 2].mean()),
            "method": "observed" if k <= n else ("shifted" if shift else "lock-step"),
            "max_2s_swing_pct": float(np.median(a[:, 0])),
            "max_2s_swing_pct_low": float(a[:, 0].min()),
            "max_2s_swing_pct_high": float(a[:, 0].max()),
            "p99_2s_swing_pct": float(np.median(a[:, 1])),
            "p99_2s_swing_pct_low": float(a[:, 1].min()),
            "p99_2s_swing_pct_high": float(a[:, 1].max()),
            "draws": len(vals),
        })
    return rows
