"""An independent reference for the event-time phase tables, in plain numpy/Python (no DuckDB):
the energy of an interval from raw samples, and the attribution rule of docs/phases.md applied by
brute force (every elementary interval checked against every request).

Convention (the issue's): power is piecewise linear between consecutive samples; the energy of
[a, b] is the trapezoid over the samples inside plus the interpolated values at a and b; a sample
interval longer than 2 s is a gap and carries nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GAP_NS = 2_000_000_000


def interval_energy_j(t_ns: np.ndarray, p_w: np.ndarray, a_ns: int, b_ns: int) -> float:
    """∫ p dt over [a, b] for one GPU's samples (sorted, distinct times)."""
    t = np.asarray(t_ns, dtype=np.int64)
    p = np.asarray(p_w, dtype=float)
    if b_ns <= a_ns or len(t) < 2:
        return 0.0
    i0 = max(int(np.searchsorted(t, a_ns, side="right")) - 1, 0)
    i1 = min(int(np.searchsorted(t, b_ns, side="left")), len(t) - 1)
    total = 0.0
    for i in range(i0, i1):
        t0, t1 = int(t[i]), int(t[i + 1])
        if t1 - t0 > GAP_NS:
            continue
        lo, hi = max(a_ns, t0), min(b_ns, t1)
        if hi <= lo:
            continue
        slope = (p[i + 1] - p[i]) / (t1 - t0)
        p_lo, p_hi = p[i] + slope * (lo - t0), p[i] + slope * (hi - t0)
        total += (p_lo + p_hi) / 2 * (hi - lo) / 1e9
    return total


@dataclass
class Request:
    request_id: str
    prefill_start_ns: int
    first_token_ns: int
    end_ns: int
    prompt_tokens: int
    output_tokens: int


def attribute(requests: list[Request], energy, lo_ns: int, hi_ns: int) -> tuple[dict, dict]:
    """The rule by brute force over [lo, hi]. ``energy(a, b)``: J of the endpoint over [a, b].
    Returns ({request_id: (prefill_j, decode_j)}, {label: (seconds, J)})."""
    cuts = {lo_ns, hi_ns}
    for r in requests:
        cuts |= {r.prefill_start_ns, r.first_token_ns, r.end_ns}
    cuts = sorted(c for c in cuts if lo_ns <= c <= hi_ns)
    charged = {r.request_id: [0.0, 0.0] for r in requests}
    totals = {"prefill": [0.0, 0.0], "decode": [0.0, 0.0], "idle": [0.0, 0.0]}
    for x, y in zip(cuts, cuts[1:], strict=False):
        pre = [r for r in requests if r.prefill_start_ns <= x and y <= r.first_token_ns]
        dec = [r for r in requests if r.first_token_ns <= x and y <= r.end_ns]
        e = energy(x, y)
        label = "prefill" if pre else "decode" if dec else "idle"
        totals[label][0] += (y - x) / 1e9
        totals[label][1] += e
        if label == "idle":
            continue
        who = pre if pre else dec
        if pre:
            rates = [max(r.prompt_tokens, 1) / (r.first_token_ns - r.prefill_start_ns) for r in who]
        else:
            rates = [max(r.output_tokens, 1) / (r.end_ns - r.first_token_ns) for r in who]
        for r, rate in zip(who, rates, strict=False):
            charged[r.request_id][0 if pre else 1] += e * rate / sum(rates)
    return {k: tuple(v) for k, v in charged.items()}, {k: tuple(v) for k, v in totals.items()}


def iou(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> float:
    """Intersection over union of two sets of half-open intervals (ns)."""
    def union(iv):
        out = []
        for s, e in sorted(iv):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    ua, ub = union(a), union(b)
    inter, i, j = 0, 0, 0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        inter += max(0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    total = sum(e - s for s, e in ua) + sum(e - s for s, e in ub) - inter
    return inter / total if total else 1.0
