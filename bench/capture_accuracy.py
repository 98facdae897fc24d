"""Energy accuracy on the real H200 captures: the pipeline's tables against an independent reference.

    PYTHONPATH=. .venv/bin/python -m bench.capture_accuracy [--shared DIR] [--json OUT] [--name NAME] [--work DIR]

For h200-capture-4 (continuous batching: the collector's own files) and h200-capture-2 (static batching:
its driver buffer cut to the inference phase ± 2 s, as tests/data/phases/h200-capture-2 holds it), read from
the shared data folder (``../shared/data``, its README), this writes each capture into a data dir the way
the capture tests do (tests/test_phases_event_time_real.py ``write_capture_4``, tests/phase_real.py
``write_h200_capture``), builds the day with ``run_day`` and compares:

- J per prompt and per output token (``energy_per_token``, bucket ``all``) with the reference's;
- ``phase_intervals``' total energy with the integral of the raw samples over the same span, and each of
  its rows with the integral over the row's own interval;
- ``request_energy`` per request with the reference: the worst difference of its prefill_j and decode_j
  (the JSON also has that of total_j);
- the power-only prefill detector (``phase_segments`` source ``power``) against the logged prefills:
  IoU inside the log's busy span (tests/power_captures.py ``prefill_iou``);
- the macro ``energy_between(host, gpu, a, b)`` on random intervals with the reference: the worst
  difference against the tolerance max(1e-6 J, 1e-12 × the GPU's day energy).

The reference is tests/phase_reference.py (plain numpy, no pipeline code): power linear between
consecutive raw samples of the driver buffer (one value per instant), trapezoids over each interval, a
gap over 2 s carries nothing; requests are charged by its brute-force attribution rule. Prints a table
and writes JSON to bench/results/capture-accuracy/<name>.json (name: the commit, unless given).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection, read_day
from tests.days import CAPTURE_2_TABLES
from tests.phase_fixtures import endpoint_inventory
from tests.phase_real import _power, _requests
from tests.phase_reference import Request, attribute, interval_energy_j
from tests.power_captures import prefill_iou

warnings.filterwarnings("ignore", module="dagster")

TABLES = CAPTURE_2_TABLES  # the phase tables the capture tests read, and what they are built from
INTERVALS = 300
EDGE_S = 2  # capture 2's cut: its inference phase marks ± 2 s


def _requests_from_csv(path: Path) -> pl.DataFrame:
    return pl.read_csv(path).select(
        pl.col("request_id").cast(pl.Utf8), "endpoint", pl.col("arrival_ns").alias("arrival_ts"),
        pl.col("prefill_start_ns").alias("prefill_start_ts"), pl.col("first_token_ns").alias("first_token_ts"),
        pl.col("end_ns").alias("end_ts"), "prompt_tokens", "output_tokens",
    )


def write_capture_4(src: Path, data_dir: Path) -> tuple[str, str, str]:
    """The collector's files as they are, its GPU in the inventory (as write_capture_4 of the tests), the
    logged requests. Returns (date, host, endpoint)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "collector" / "power", data_dir / "power")
    inv = {"fleets": [{"name": "lab", "clusters": [{"name": "c0", "hosts": [{
        "name": "h200-lab", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H200"}],
        "endpoints": [{"name": "llm-8b-cb-0", "gpus": [0], "model": "llama-8b", "params_b": 8, "precision": "bf16", "tp": 1}],
    }]}]}]}
    dump_inventory(parse_inventory(inv), data_dir / "inventory.yaml")
    write_dataset(_requests(_requests_from_csv(src / "requests.csv")), data_dir, "requests", prefix="cap4")
    return "2026-12-03", "h200-lab", "llm-8b-cb-0"


def write_capture_2(src: Path, data_dir: Path) -> tuple[str, str, str]:
    """The driver buffer from 2 s before the ``infer`` mark to 2 s after the ``idle1`` mark (the rows of
    tests/data/phases/h200-capture-2/driver_buffer_infer.csv) as `nvml-buffer` rows of host infer-0, and
    the logged requests (as write_h200_capture of the tests)."""
    marks = dict(line.split()[:2] for line in (src / "phases.txt").read_text().splitlines() if len(line.split()) == 2 and line.split()[1].isdigit())
    lo_us = (int(marks["infer"]) - EDGE_S * 10**9) // 1000
    hi_us = (int(marks["idle1"]) + EDGE_S * 10**9) // 1000
    buf = pl.read_csv(src / "driver_buffer.csv").filter(pl.col("driver_ts_us").is_between(lo_us, hi_us))
    endpoint_inventory(data_dir, endpoint="llm-8b-0", gpus=1, tdp_w=700.0, model="H200")
    write_dataset(_power(buf["driver_ts_us"] * 1000, buf["power_mw"] / 1000.0, "infer-0", "nvml-buffer"), data_dir, "power", prefix="h200")
    write_dataset(_requests(_requests_from_csv(src / "requests.csv")), data_dir, "requests", prefix="h200")
    return "2026-12-02", "infer-0", "llm-8b-0"


CAPTURES: dict[str, tuple[str, Callable[[Path, Path], tuple[str, str, str]]]] = {
    "h200-capture-4": ("continuous", write_capture_4),
    "h200-capture-2": ("static", write_capture_2),
}


def raw_buffer(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The GPU's driver-buffer samples read straight from the raw files: (t ns, W), sorted, one value per
    instant (the mean of a repeated one)."""
    df = (pl.read_parquet(str(data_dir / "power" / "**" / "*.parquet"), hive_partitioning=False)
          .filter(pl.col("source").cast(pl.Utf8) == "nvml-buffer")
          .select(pl.col("ts").dt.epoch("ns").alias("t"), pl.col("power_w").cast(pl.Float64))
          .group_by("t").agg(pl.col("power_w").mean()).sort("t"))
    return df["t"].to_numpy(), df["power_w"].to_numpy()


def logged_requests(data_dir: Path) -> list[Request]:
    df = pl.read_parquet(str(data_dir / "requests" / "**" / "*.parquet"), hive_partitioning=False)
    ns = {c: df[c].dt.epoch("ns").to_list() for c in ("prefill_start_ts", "first_token_ts", "end_ts")}
    return [Request(str(rid), a, b, c, int(pt), int(ot)) for rid, a, b, c, pt, ot in zip(
        df["request_id"].to_list(), ns["prefill_start_ts"], ns["first_token_ts"], ns["end_ts"],
        df["prompt_tokens"].to_list(), df["output_tokens"].to_list(), strict=True)]


def random_intervals(t: np.ndarray, n: int, seed: int) -> np.ndarray:
    """(a, b) in µs since the epoch (TIMESTAMPTZ's resolution), a ≤ b: a third anywhere from 5 s before the
    first sample to 5 s after the last, a third shorter than 2 s, a third from a sample's instant to a
    second boundary."""
    rng = np.random.default_rng(seed)
    lo, hi = int(t[0]) // 1000 - 5_000_000, int(t[-1]) // 1000 + 5_000_000
    k = n // 3
    wide = np.sort(rng.integers(lo, hi, (k, 2)), axis=1)
    a = rng.integers(lo, hi, k)
    short = np.stack([a, a + rng.integers(0, 2_000_000, k)], axis=1)
    on = t[rng.integers(0, len(t), n - 2 * k)] // 1000
    edge = (on + rng.integers(0, 3, n - 2 * k) * 1_000_000) // 1_000_000 * 1_000_000
    on_samples = np.sort(np.stack([on, edge], axis=1), axis=1)
    return np.concatenate([wide, short, on_samples]).astype(np.int64)


def measure(name: str, batching: str, data_dir: Path, date: str, host: str, endpoint: str, seed: int) -> dict:
    t, p = raw_buffer(data_dir)
    reqs = logged_requests(data_dir)
    energy = lambda a, b: interval_energy_j(t, p, a, b)
    charged, totals = attribute(reqs, energy, int(t[0]), int(t[-1]))
    span_j = energy(int(t[0]), int(t[-1]))
    ref_prompt = sum(c[0] for c in charged.values()) / sum(r.prompt_tokens for r in reqs)
    ref_output = sum(c[1] for c in charged.values()) / sum(r.output_tokens for r in reqs)

    ept = pl.from_arrow(read_day(data_dir, "energy_per_token", date)).filter(pl.col("bucket_kind") == "all")
    assert isinstance(ept, pl.DataFrame) and ept.height == 1, ept
    intervals = pl.from_arrow(read_day(data_dir, "phase_intervals", date))
    assert isinstance(intervals, pl.DataFrame)
    row_diff = [abs(e - energy(a, b)) for a, b, e in intervals.select("start_ns", "end_ns", "energy_j").iter_rows()]
    by_phase = {ph: float(intervals.filter(pl.col("phase") == ph)["energy_j"].sum()) for ph in ("prefill", "decode", "idle")}
    per_request = pl.from_arrow(read_day(data_dir, "request_energy", date))
    assert isinstance(per_request, pl.DataFrame) and per_request.height == len(reqs)
    rows = list(per_request.select("request_id", "prefill_j", "decode_j", "total_j").iter_rows())
    worst_req = max(max(abs(pj - charged[rid][0]), abs(dj - charged[rid][1])) for rid, pj, dj, _ in rows)
    worst_total = max(abs(tj - sum(charged[rid])) for rid, _, _, tj in rows)
    segs = pl.from_arrow(read_day(data_dir, "phase_segments", date))
    assert isinstance(segs, pl.DataFrame)
    power_prefills = segs.filter((pl.col("source") == "power") & (pl.col("phase") == "prefill"))
    logged = pl.DataFrame({"prefill_start_ns": [r.prefill_start_ns for r in reqs], "first_token_ns": [r.first_token_ns for r in reqs],
                           "end_ns": [r.end_ns for r in reqs]})
    iou = prefill_iou(list(zip(power_prefills["start_ts"].dt.epoch("ns").to_list(), power_prefills["end_ts"].dt.epoch("ns").to_list(),
                               strict=True)), logged)

    ab = random_intervals(t, INTERVALS, seed)
    with compute_connection(data_dir, date) as con:
        got_between = np.array([con.execute("SELECT energy_between(?, ?, make_timestamptz(?::BIGINT), make_timestamptz(?::BIGINT))",
                                            [host, 0, int(a), int(b)]).fetchone()[0] for a, b in ab])
    want_between = np.array([energy(int(a) * 1000, int(b) * 1000) for a, b in ab])
    tol = max(1e-6, 1e-12 * span_j)
    diff = np.abs(got_between - want_between)
    return {
        "capture": name, "batching": batching, "date": date, "host": host, "endpoint": endpoint,
        "buffer_samples": len(t), "requests": len(reqs),
        "j_per_prompt_token": ept["j_per_prompt_token"][0], "j_per_prompt_token_ref": ref_prompt,
        "j_per_output_token": ept["j_per_output_token"][0], "j_per_output_token_ref": ref_output,
        "phase_intervals_j": float(intervals["energy_j"].sum()), "raw_integral_j": span_j,
        "phase_intervals_rows": intervals.height, "phase_intervals_worst_row_diff_j": max(row_diff),
        "phase_intervals_by_phase_j": by_phase, "ref_by_phase_j": {k: v[1] for k, v in totals.items()},
        "worst_request_diff_j": worst_req, "worst_request_total_diff_j": worst_total,
        "power_prefill_iou": iou, "power_prefill_segments": power_prefills.height,
        "energy_between": {"intervals": len(ab), "seed": seed, "worst_diff_j": float(diff.max()), "tolerance_j": tol,
                           "within_tolerance": bool(diff.max() <= tol),
                           "worst_interval_us": [int(x) for x in ab[int(diff.argmax())]]},
    }


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _vs(r: dict) -> str:
    got, want = r["phase_intervals_j"], r["raw_integral_j"]
    return (f"{got:,.3f} J vs {want:,.3f} J (difference {got - want:.1e} J; worst of its {r['phase_intervals_rows']:,} rows "
            f"{r['phase_intervals_worst_row_diff_j']:.1e} J)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.capture_accuracy", description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data", help="the shared data folder (its README)")
    ap.add_argument("--work", type=Path, default=None, help="where the captures' data dirs are built (default: a temporary folder)")
    ap.add_argument("--name", default=None, help="results file name (default: the commit)")
    ap.add_argument("--json", type=Path, default=None, help="write the JSON here instead of bench/results/capture-accuracy/<name>.json")
    ap.add_argument("--seed", type=int, default=7, help="seed of the random energy_between intervals")
    a = ap.parse_args(argv)
    missing = [name for name in CAPTURES if not (a.shared / name).is_dir()]
    if missing:
        ap.error(f"{', '.join(missing)} not under {a.shared} (pass --shared DIR: the shared data folder)")
    commit = _commit()
    out = a.json or ROOT / "bench" / "results" / "capture-accuracy" / f"{a.name or commit}.json"
    rows = []
    with tempfile.TemporaryDirectory(prefix="capture-accuracy-") as tmp:
        work = a.work or Path(tmp)
        for name, (batching, write) in CAPTURES.items():
            data_dir = work / name / "data"
            if data_dir.exists():
                shutil.rmtree(data_dir)
            date, host, endpoint = write(a.shared / name, data_dir)
            outcome = run_day(data_dir, date, selection=TABLES)
            assert outcome.success, outcome.error
            rows.append(measure(name, batching, data_dir, date, host, endpoint, a.seed))
    print("| capture | J/prompt token (ref) | J/output token (ref) | phase_intervals energy vs raw-sample integral | "
          "worst per-request difference | power-only prefill IoU | energy_between, worst of N (tolerance) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        eb = r["energy_between"]
        print(f"| {r['capture'].rsplit('-', 1)[1]} ({r['batching']}) | {r['j_per_prompt_token']:.4f} ({r['j_per_prompt_token_ref']:.4f}) | "
              f"{r['j_per_output_token']:.4f} ({r['j_per_output_token_ref']:.4f}) | "
              f"{_vs(r)} | {r['worst_request_diff_j']:.1e} J | {r['power_prefill_iou']:.3f} | "
              f"{eb['worst_diff_j']:.1e} J of {eb['intervals']} ({eb['tolerance_j']:.0e} J) |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": commit, "shared": str(a.shared), "captures": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
