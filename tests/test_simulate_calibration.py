"""The simulator's phase levels stay near what a real H200 showed (tests/data/h200_capture_2).

The capture served an 8B model with static batching and trained a 1.5B model, so only the levels
that do not depend on the model size are compared: idle, loaded-idle, prefill, step, checkpoint.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from collectors.contract import epoch_ns
from collectors.simulate import simulate

DATA = Path(__file__).parent / "data" / "h200_capture_2"


def _csv(name: str) -> dict[str, np.ndarray]:
    with open(DATA / name) as fh:
        rows = list(csv.DictReader(fh))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _inside(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    order = np.argsort(start)
    start, end = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(start, t, side="right") - 1
    return (i >= 0) & (t < end[np.maximum(i, 0)])


@pytest.fixture(scope="module")
def real() -> dict[str, float]:
    p = _csv("power_100ms.csv")
    t, w = p["t_ns"].astype(np.int64), p["power_instant_mw"].astype(float) / 1000
    marks = {ln.split()[0]: int(ln.split()[1]) for ln in (DATA / "phases.txt").read_text().splitlines() if len(ln.split()) == 2 and ln.split()[1].isdigit()}
    req = _csv("requests.csv")
    ps, ft, end = (req[c].astype(np.int64) for c in ("prefill_start_ns", "first_token_ns", "end_ns"))
    steps = _csv("train_steps.csv")
    ramp = 60_000_000

    def kind(k: str) -> np.ndarray:
        m = steps["kind"] == k
        return _inside(t, steps["start_ns"][m].astype(np.int64) + ramp, steps["end_ns"][m].astype(np.int64) - 10_000_000)

    serving = (t > marks["infer"]) & (t < marks["idle1"])
    return {
        "idle": float(np.median(w[t < marks["infer"]])),
        "loaded": float(np.median(w[serving & ~_inside(t, ps - ramp, end + ramp)])),
        "prefill": float(np.median(w[_inside(t, ps + ramp, ft)])),
        "step": float(np.median(w[kind("step")])),
        "checkpoint": float(np.median(w[kind("checkpoint")])),
    }


def _unloaded_gpu_w() -> np.ndarray:
    """The tiny fleet loads every GPU, so sample a GPU with nothing on it directly."""
    from collectors.simulate import phases, power

    idle = phases.Timeline.constant(phases.IDLE, phases.IDLE_W)
    rec, _ = power.sample_gpu(np.random.default_rng(0), idle, (0.0, 60.0), 0, 0.0, power.MEM_IDLE_MIB, 1.0, 0.0)
    return rec.power_w


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[str, float]:
    root = tmp_path_factory.mktemp("calib")
    simulate(root, start=dt.date(2026, 12, 2), seed=11, fleet="tiny", hours=0.6)
    power = pa.concat_tables(pq.read_table(f) for f in sorted(root.glob("power/*/*/*.parquet")))
    req = pa.concat_tables(pq.read_table(f) for f in root.glob("requests/*/*.parquet"))
    ev = pa.concat_tables(pq.read_table(f) for f in root.glob("job_events/*/*.parquet"))
    ns = lambda tab, c: epoch_ns(tab.column(c)).to_numpy()  # noqa: E731
    ramp = 60_000_000

    def gpu(host: str, g: int) -> tuple[np.ndarray, np.ndarray]:
        t = power.filter(pc.and_(pc.equal(power["host"], host), pc.equal(power["gpu"], g)))
        return ns(t, "ts"), t.column("power_w").to_numpy()

    t, w = gpu("infer-0", 2)
    r = req.filter(pc.equal(req["endpoint"], "chat-b"))
    ps, ft, end = ns(r, "prefill_start_ts"), ns(r, "first_token_ts"), ns(r, "end_ts")
    idle_mask = ~_inside(t, ps - ramp, end + ramp)
    tt, tw = gpu("train-0", 0)

    def kind(k: str) -> np.ndarray:
        e = ev.filter(pc.equal(ev["kind"], k))
        return _inside(tt, ns(e, "start_ts") + ramp, ns(e, "end_ts") - 10_000_000)

    assert idle_mask.sum() > 20
    return {
        "idle": float(np.median(_unloaded_gpu_w())),
        "loaded": float(np.median(w[idle_mask])),
        "prefill": float(np.median(w[_inside(t, ps + ramp, ft)])),
        "step": float(np.median(tw[kind("step")])),
        "checkpoint": float(np.median(tw[kind("checkpoint")])),
    }


@pytest.mark.parametrize(
    "phase, tolerance_w",
    [("idle", 5), ("loaded", 12), ("prefill", 60), ("step", 60), ("checkpoint", 10)],
)
def test_phase_level_matches_the_real_h200(real, simulated, phase, tolerance_w):
    assert abs(simulated[phase] - real[phase]) <= tolerance_w, (phase, simulated[phase], real[phase])
