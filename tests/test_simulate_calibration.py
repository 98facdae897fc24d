"""The simulator's phase levels stay near what a real H200 showed.

Capture 4 (tests/data/h200_capture_4) is the capture its levels were fitted on
(collectors/simulate/calibration.py, bench/calibrate_simulator.py): the simulator must reproduce it.
Capture 2 (tests/data/h200_capture_2) was not used for fitting: the levels that do not depend on the
serving engine (idle, training step, checkpoint) must transfer. Where the captures differ, the test says
so rather than widening a tolerance: capture 2's server kept its clocks up between static batches
(loaded 120 W vs 84 W) and its padded batch prefills ran at 734 W vs 788 W.
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
from collectors.nvml.rows import BUFFER
from collectors.simulate import Arrivals, simulate

DATA = Path(__file__).parent / "data"
RAMP_NS = 60_000_000
ONSET_NS = 100_000_000
"""A prefill's power shows ~60 ms after it starts and ramps for ~40 ms (calibration.PREFILL_ONSET_S)."""


def _csv(path: Path) -> dict[str, np.ndarray]:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _inside(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    order = np.argsort(start)
    start, end = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(start, t, side="right") - 1
    return (i >= 0) & (t < end[np.maximum(i, 0)])


def _levels(t, w, marks, req, steps) -> dict[str, float]:
    ps, ft, end = (req[c].astype(np.int64) for c in ("prefill_start_ns", "first_token_ns", "end_ns"))

    def kind(k: str) -> np.ndarray:
        m = steps["kind"] == k
        return _inside(t, steps["start_ns"][m].astype(np.int64) + RAMP_NS, steps["end_ns"][m].astype(np.int64) - 10_000_000)

    serving = (t > marks["infer"]) & (t < marks["idle1"])
    return {
        "idle": float(np.median(w[t < marks["infer"]])),
        "loaded": float(np.median(w[serving & ~_inside(t, ps - RAMP_NS, end + RAMP_NS)])),
        "prefill": float(np.median(w[_inside(t, ps + ONSET_NS, ft)])),
        "step": float(np.median(w[kind("step")])),
        "checkpoint": float(np.median(w[kind("checkpoint")])),
    }


def _marks(path: Path) -> dict[str, int]:
    return {ln.split()[0]: int(ln.split()[1]) for ln in path.read_text().splitlines() if len(ln.split()) == 2 and ln.split()[1].isdigit()}


@pytest.fixture(scope="module")
def capture4() -> dict[str, float]:
    src = DATA / "h200_capture_4"
    p = pq.read_table(src / "collector_power.parquet")
    b = p.filter(pc.equal(p["source"].cast(pa.string()), BUFFER))
    t, w = epoch_ns(b["ts"]).to_numpy(), b["power_w"].to_numpy().astype(float)
    return _levels(t, w, _marks(src / "phases.txt"), _csv(src / "requests.csv"), _csv(src / "train_steps.csv"))


@pytest.fixture(scope="module")
def capture2() -> dict[str, float]:
    src = DATA / "h200_capture_2"
    p = _csv(src / "power_100ms.csv")
    t, w = p["t_ns"].astype(np.int64), p["power_instant_mw"].astype(float) / 1000
    return _levels(t, w, _marks(src / "phases.txt"), _csv(src / "requests.csv"), _csv(src / "train_steps.csv"))


def _unloaded_gpu_w() -> np.ndarray:
    """The tiny fleet loads every GPU, so sample a GPU with nothing on it directly."""
    from collectors.simulate import phases, power

    idle = phases.Timeline.constant(phases.IDLE, phases.IDLE_W)
    rec, _ = power.sample_gpu(np.random.default_rng(0), idle, (0.0, 60.0), 0, 0.0, power.MEM_IDLE_MIB, 1.0, 0.0)
    return rec.power_w


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[str, float]:
    root = tmp_path_factory.mktemp("calib")
    hours = 0.6
    # chat-b gets one request every 20 s (long prompts, so prefills outlast their onset; short outputs):
    # its GPUs also sit loaded with nothing running, which a continuous Poisson stream never leaves them
    t = np.arange(3.0, hours * 3600, 20.0)
    sparse = Arrivals(t, np.full(len(t), 6000), np.full(len(t), 40))
    simulate(root, start=dt.date(2026, 12, 2), seed=11, fleet="tiny", hours=hours, arrivals={"chat-b": sparse})
    power = pa.concat_tables(pq.read_table(f) for f in sorted(root.glob("power/*/*/*.parquet")))
    req = pa.concat_tables(pq.read_table(f) for f in root.glob("requests/*/*.parquet"))
    ev = pa.concat_tables(pq.read_table(f) for f in root.glob("job_events/*/*.parquet"))
    ns = lambda tab, c: epoch_ns(tab.column(c)).to_numpy()  # noqa: E731

    def gpu(host: str, g: int) -> tuple[np.ndarray, np.ndarray]:
        t = power.filter(pc.and_(pc.equal(power["host"], host), pc.equal(power["gpu"], g)))
        return ns(t, "ts"), t.column("power_w").to_numpy()

    t, w = gpu("infer-0", 2)
    r = req.filter(pc.equal(req["endpoint"], "chat-b"))
    ps, ft, end = ns(r, "prefill_start_ts"), ns(r, "first_token_ts"), ns(r, "end_ts")
    idle_mask = ~_inside(t, ps - RAMP_NS, end + RAMP_NS)
    tt, tw = gpu("train-0", 0)

    def kind(k: str) -> np.ndarray:
        e = ev.filter(pc.equal(ev["kind"], k))
        return _inside(tt, ns(e, "start_ts") + RAMP_NS, ns(e, "end_ts") - 10_000_000)

    assert idle_mask.sum() > 20 and _inside(t, ps + ONSET_NS, ft).sum() > 20
    return {
        "idle": float(np.median(_unloaded_gpu_w())),
        "loaded": float(np.median(w[idle_mask])),
        "prefill": float(np.median(w[_inside(t, ps + ONSET_NS, ft)])),
        "step": float(np.median(tw[kind("step")])),
        "checkpoint": float(np.median(tw[kind("checkpoint")])),
    }


@pytest.mark.parametrize(
    "phase, tolerance_w",
    [("idle", 5), ("loaded", 8), ("prefill", 50), ("step", 40), ("checkpoint", 8)],
)
def test_phase_level_reproduces_the_fitting_capture(capture4, simulated, phase, tolerance_w):
    assert abs(simulated[phase] - capture4[phase]) <= tolerance_w, (phase, simulated[phase], capture4[phase])


@pytest.mark.parametrize("phase, tolerance_w", [("idle", 5), ("step", 40), ("checkpoint", 8)])
def test_engine_independent_levels_transfer_to_the_validation_capture(capture2, simulated, phase, tolerance_w):
    assert abs(simulated[phase] - capture2[phase]) <= tolerance_w, (phase, simulated[phase], capture2[phase])


def test_the_captures_differ_where_the_serving_engine_differs(capture2, capture4):
    """Not a tolerance: the reason loaded and prefill are compared with capture 4 only."""
    assert capture2["loaded"] - capture4["loaded"] > 25
    assert capture4["prefill"] - capture2["prefill"] > 20
