"""Event-time phases on real captures against an independent reference (tests/phase_reference.py:
trapezoid between the driver's ~20 ms buffer samples, linear interpolation inside a sample interval
at each boundary, the attribution rule by brute force).

- h200-capture-4 (tests/data/h200-capture-4, SOURCE.md): the collector's own files, continuous
  batching, 368 requests, median prefill 90 ms.
- h200-capture-2 (tests/data/phases/h200-capture-2): static batching, 59 requests.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.assets.inference_phases import power_resolution
from pipeline.warehouse import compute_connection, read_day
from tests.days import BuiltDay
from tests.phase_real import _requests
from tests.phase_reference import Request, attribute, interval_energy_j, iou

CAPTURE_4 = Path(__file__).parent / "data" / "h200-capture-4"
ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments",
          "request_energy", "energy_per_token"]


def write_capture_4(data_dir: Path) -> str:
    """The collector's files as they are, one inventory entry for its GPU (with the model its
    endpoint served: an 8B Llama in bf16 on one GPU), and the logged requests."""
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(CAPTURE_4 / "power", data_dir / "power")
    inv = {"fleets": [{"name": "lab", "clusters": [{"name": "c0", "hosts": [{
        "name": "h200-lab", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H200"}],
        "endpoints": [{"name": "llm-8b-cb-0", "gpus": [0], "model": "llama-8b", "params_b": 8, "precision": "bf16", "tp": 1}],
    }]}]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    req = pl.read_csv(CAPTURE_4 / "requests.csv").select(
        "request_id", "endpoint", pl.col("arrival_ns").alias("arrival_ts"), pl.col("prefill_start_ns").alias("prefill_start_ts"),
        pl.col("first_token_ns").alias("first_token_ts"), pl.col("end_ns").alias("end_ts"), "prompt_tokens", "output_tokens",
    )
    write_dataset(_requests(req), data_dir, "requests", prefix="cap4")
    return "2026-12-03"


def _buffer(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The GPU's buffer samples, read straight from the raw files (one value per timestamp)."""
    df = (pl.read_parquet(str(data_dir / "power" / "**" / "*.parquet"), hive_partitioning=False)
          .filter(pl.col("source").cast(pl.Utf8) == "nvml-buffer")
          .select(pl.col("ts").dt.epoch("ns").alias("t"), pl.col("power_w").cast(pl.Float64))
          .group_by("t").agg(pl.col("power_w").mean()).sort("t"))
    return df["t"].to_numpy(), df["power_w"].to_numpy()


def _read(day: BuiltDay):
    """The shared day's phase tables and the reference computed from its raw files."""
    data_dir, date, outcome = day.data_dir, day.date, day.outcome
    assert set(ASSETS) <= day.tables(), outcome.materialized
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in ASSETS[3:]:
        con.register(name, read_day(data_dir, name, date))
    t, p = _buffer(data_dir)
    reqs = [Request(str(r[0]), *(int(x) for x in r[1:4]), int(r[4]), int(r[5])) for r in con.execute(
        """SELECT request_id, epoch_ns(prefill_start_ts), epoch_ns(first_token_ts), epoch_ns(end_ts), prompt_tokens, output_tokens
           FROM read_parquet(?)""", [str(data_dir / "requests" / "**" / "*.parquet")]).fetchall()]
    charged, totals = attribute(reqs, lambda a, b: interval_energy_j(t, p, a, b), int(t[0]), int(t[-1]))
    ref = {
        "data_dir": data_dir, "date": date, "charged": charged, "totals": totals, "requests": reqs, "span_j": interval_energy_j(t, p, int(t[0]), int(t[-1])),
        "j_per_prompt_token": sum(c[0] for c in charged.values()) / sum(r.prompt_tokens for r in reqs),
        "j_per_output_token": sum(c[1] for c in charged.values()) / sum(r.output_tokens for r in reqs),
    }
    return con, outcome, ref


@pytest.fixture(scope="module")
def cap4(capture_4_day):
    return _read(capture_4_day)


@pytest.fixture(scope="module")
def cap2(capture_2_day):
    return _read(capture_2_day)


# A capture day taken by name (request.getfixturevalue) is not in a test's fixture closure, where
# tests/conftest.py looks for a day built through the daily job: its params say `slow` themselves.
CAPTURES = [pytest.param(name, marks=pytest.mark.slow, id=name) for name in ("cap4", "cap2")]


@pytest.fixture(params=CAPTURES)
def capture(request):
    return request.getfixturevalue(request.param)


def test_prefill_segments_at_logged_event_timestamps(capture):
    con, _, ref = capture
    segs = con.execute(
        "SELECT epoch_us(start_ts), epoch_us(end_ts) FROM phase_segments WHERE source = 'requests' AND phase = 'prefill' ORDER BY 1"
    ).fetchall()
    starts = {r.prefill_start_ns // 1000 for r in ref["requests"]}
    ends = {r.first_token_ns // 1000 for r in ref["requests"]}
    assert segs and all(a in starts and b in ends for a, b in segs)
    logged = [(r.prefill_start_ns // 1000, r.first_token_ns // 1000) for r in ref["requests"]]
    assert iou(segs, logged) == pytest.approx(1.0, abs=1e-9)


def test_joules_per_token_match_the_reference(capture):
    con, _, ref = capture
    pre, out = con.execute(
        "SELECT j_per_prompt_token, j_per_output_token FROM energy_per_token WHERE bucket_kind = 'all'"
    ).fetchone()
    assert pre == pytest.approx(ref["j_per_prompt_token"], rel=0.03)
    assert out == pytest.approx(ref["j_per_output_token"], rel=0.03)
    got = {r[0]: r[1:] for r in con.execute("SELECT request_id, prefill_j, decode_j FROM request_energy").fetchall()}
    for rid, (p, d) in ref["charged"].items():
        assert got[rid] == (pytest.approx(p, rel=1e-6, abs=1e-6), pytest.approx(d, rel=1e-6, abs=1e-6)), rid


def test_conservation_per_endpoint_day(capture):
    con, outcome, ref = capture
    measured, idle = con.execute("SELECT sum(energy_j), sum(energy_j) FILTER (WHERE phase = 'idle') FROM phase_intervals").fetchone()
    charged = con.execute("SELECT sum(total_j) FROM request_energy").fetchone()[0]
    assert measured == pytest.approx(ref["span_j"], rel=1e-6)
    assert charged + idle == pytest.approx(measured, rel=1e-6)
    assert "energy_conservation" not in {c.check for c in outcome.failed_checks}


def test_capture_4_matches_the_published_reference(cap4):
    """The capture's README: prefill 16.25 kJ, decode 42.09 kJ, 0.0208 J per prompt token, 0.511 J
    per output token (computed from driver_buffer.csv by the capture's author)."""
    con, _, ref = cap4
    pre, out, share = con.execute(
        "SELECT j_per_prompt_token, j_per_output_token, prefill_time_share FROM energy_per_token WHERE bucket_kind = 'all'"
    ).fetchone()
    assert pre == pytest.approx(0.0208, rel=0.02) and out == pytest.approx(0.511, rel=0.02)
    assert share == pytest.approx(ref["totals"]["prefill"][0] / (ref["totals"]["prefill"][0] + ref["totals"]["decode"][0]), rel=1e-6)
    assert 0.15 < share < 0.2  # 37.6 s of prefill in 208 s busy


def test_power_resolution_is_reported(cap4):
    _, _, ref = cap4
    with compute_connection(ref["data_dir"], ref["date"]) as con:
        got = power_resolution(con)
    assert got == {
        "llm-8b-cb-0": {"nvml-buffer": {"sample_interval_ms": 20.0, "power_only": "resolves prefills of a few samples, continuous batching's included"}}
    }


# Power-only prefill detection at native resolution (issue 15, item 3). The reference is the logged
# prefill intervals, compared by tests/phase_reference.iou inside the log's busy span (the GPU also
# trains after serving: power-only prefills there have no logged counterpart). The onset lead of the
# nvml-buffer source (60 ms) was fitted on capture 2 and is checked on capture 4
# (pipeline/phases/power_detect.py).
POWER_IOU_MIN = {"cap2": 0.85, "cap4": 0.6}


@pytest.mark.parametrize("name", CAPTURES[::-1])
def test_power_only_prefills_match_the_logged_prefills(request, name):
    con, outcome, ref = request.getfixturevalue(name)
    assert "power_segmentation_agreement" not in {c.check for c in outcome.failed_checks}
    logged = [(r.prefill_start_ns, r.first_token_ns) for r in ref["requests"]]
    lo = min(r.prefill_start_ns for r in ref["requests"])
    hi = max(r.end_ns for r in ref["requests"])
    power = [
        (max(a, lo), min(b, hi))
        for a, b in con.execute("SELECT epoch_ns(start_ts), epoch_ns(end_ts) FROM phase_segments WHERE source = 'power' AND phase = 'prefill'").fetchall()
        if b > lo and a < hi
    ]
    got = iou(power, logged)
    print(f"{name}: power-only prefill IoU {got:.3f} over {len(power)} segments")
    assert got >= POWER_IOU_MIN[name]
    # native instants: every boundary is a buffer sample's own timestamp (µs), not a 100 ms slot
    t, _ = _buffer(ref["data_dir"]) if name == "cap4" else (None, None)
    if t is not None:
        samples = set((t // 1000).tolist())
        assert all(
            a // 1000 in samples and b // 1000 in samples
            for a, b in con.execute("SELECT epoch_ns(start_ts), epoch_ns(end_ts) FROM phase_segments WHERE source = 'power'").fetchall()
        )


def test_power_segment_energies_come_from_the_curve(cap4):
    """E(end) − E(start) of the reference trapezoid for each power-only segment, 1e-6 relative."""
    con, _, ref = cap4
    t, p = _buffer(ref["data_dir"])
    rows = con.execute(
        "SELECT epoch_ns(start_ts), epoch_ns(end_ts), energy_j, mean_w, sample_interval_ms FROM phase_segments WHERE source = 'power'"
    ).fetchall()
    assert len(rows) > 300
    for a, b, e, mean_w, interval_ms in rows:
        assert e == pytest.approx(interval_energy_j(t, p, a, b), rel=1e-6, abs=1e-6)
        assert mean_w == pytest.approx(e / ((b - a) / 1e9), rel=1e-5)
        assert interval_ms == pytest.approx(20.0, abs=0.5)
