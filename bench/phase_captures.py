"""Power-only prefill detection on every real H200 capture, fit and validate marked (docs/phases.md's table).

    PYTHONPATH=. .venv/bin/python bench/phase_captures.py [--lead-ms 60]

Runs pipeline/phases/power_detect.py's ``detect_gpu`` on each capture's driver buffer exactly as the
``phase_segments`` asset does for an `nvml-buffer` GPU (tests/test_phases_power_captures.py runs the asset
itself) and scores its prefill runs against the logged prefills: IoU, precision and recall of prefill
time inside the log's busy span; with the verdict of ``power_detect.unresolved``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.phases import power_detect
from tests.power_captures import FIT, buffer, busy_span, prefill_iou, requests, validate_captures


def _measure(intervals: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in _union(intervals))


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def score(c, lead_ns: int) -> dict:
    t, p = buffer(c)
    req = requests(c)
    lo, hi = busy_span(req)
    runs = power_detect.detect_gpu(0, t, p, 700.0, lead_ns, True)
    verdict = power_detect.unresolved(t, p, 700.0, int(np.median(np.diff(t))))
    pre = runs.filter(pl.col("ph") == 2)
    power = [(max(a, lo), min(b, hi)) for a, b in zip(pre["lo"].to_list(), pre["hi"].to_list(), strict=True) if b > lo and a < hi]
    logged = list(zip(req["prefill_start_ns"].to_list(), req["first_token_ns"].to_list(), strict=True))
    inter = _measure(power) + _measure(logged) - _measure(power + logged)
    pf = (req["first_token_ns"] - req["prefill_start_ns"]).to_numpy() / 1e6
    return {
        "capture": c.name, "split": c.split, "batching": c.batching, "model": c.model, "requests": req.height,
        "prefill_median_ms": float(np.median(pf)), "prefill_share": _measure(logged) / (hi - lo),
        "iou": prefill_iou(list(zip(pre["lo"].to_list(), pre["hi"].to_list(), strict=True)), req),
        "precision": inter / max(_measure(power), 1), "recall": inter / max(_measure(logged), 1),
        "verdict": verdict,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lead-ms", type=float, default=power_detect.ONSET_LEAD_NS["nvml-buffer"] / 1e6)
    a = ap.parse_args()
    print("| capture | split | model, batching | requests | median prefill | prefill share of busy time | IoU | precision / recall | power_only |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in FIT + validate_captures():
        s = score(c, int(a.lead_ms * 1e6))
        verdict = f"cannot be resolved: {s['verdict']}" if s["verdict"] else "resolved"
        print(f"| {s['capture']} | {s['split']} | {s['model']}, {s['batching']} | {s['requests']} | {s['prefill_median_ms']:.0f} ms | "
              f"{s['prefill_share']:.2f} | {s['iou']:.3f} | {s['precision']:.2f} / {s['recall']:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
