"""The demo day's day/night shape from the raw files: hourly inference power and requests per UTC hour.

    python bench/demo_day.py [--seed 0] [--workdir bench/work/demo-day]

Simulates the built-in ``demo`` fleet for one day (``--shape simple``), then sums, per UTC hour, the
inference hosts' mean power (each GPU's 10 Hz samples averaged per hour, summed over GPUs) and counts
the requests that arrived, and prints the peak and trough hour of each with their ratio, beside the
stated ``fleets.DEMO_ARRIVAL_PEAK_TROUGH``: the numbers in docs/simulator.md ("Arrivals and the demo's day").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from collectors.contract import epoch_ns  # noqa: E402
from collectors.simulate import simulate  # noqa: E402
from collectors.simulate.fleets import DEMO_ARRIVAL_PEAK_TROUGH  # noqa: E402

DAY = dt.date(2026, 12, 1)


def peak_trough(per_hour: np.ndarray) -> dict:
    hi, lo = int(per_hour.argmax()), int(per_hour.argmin())
    return {"peak_hour": hi, "peak": round(float(per_hour[hi]), 2), "trough_hour": lo, "trough": round(float(per_hour[lo]), 2),
            "peak_over_trough": round(float(per_hour[hi] / per_hour[lo]), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "work" / "demo-day")
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    t0 = time.monotonic()
    summary = simulate(args.workdir, start=DAY, seed=args.seed, fleet="demo")
    sim_s = time.monotonic() - t0
    epoch = int(dt.datetime.combine(DAY, dt.time(), tzinfo=dt.UTC).timestamp()) * 10**9
    power_w = np.zeros(24)
    for f in sorted((args.workdir / "power").rglob("*.parquet")):
        if not f.parent.name.startswith("host=infer-"):
            continue
        t = pq.read_table(f, columns=["ts", "power_w"])
        hour = np.clip((epoch_ns(t["ts"]).to_numpy() - epoch) // (3600 * 10**9), 0, 23)
        power_w += np.bincount(hour, weights=t["power_w"].to_numpy(), minlength=24) / np.bincount(hour, minlength=24)
    req = pq.read_table(next((args.workdir / "requests").rglob("*.parquet")), columns=["arrival_ts"])
    hour = np.clip((epoch_ns(req["arrival_ts"]).to_numpy() - epoch) // (3600 * 10**9), 0, 23)
    requests_per_s = np.bincount(hour, minlength=24) / 3600.0
    result = {"seed": args.seed, "day": DAY.isoformat(), "simulate_wall_s": round(sim_s, 1), "gpus": summary.gpus,
              "requests": summary.requests, "stated_arrival_peak_over_trough": DEMO_ARRIVAL_PEAK_TROUGH,
              "requests_per_s": peak_trough(requests_per_s), "inference_power_w": peak_trough(power_w)}
    print(json.dumps(result, indent=1))
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
