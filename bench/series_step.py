"""CPU and peak RSS of the per-GPU series tables (power_1s, power_100ms, energy_curve) alone, on
h200-capture-4's collector files tiled over N GPUs x H hours (bench/event_time.py's data, one
host of 8 GPUs), with another checkout's code (``--before DIR``, e.g. a detached worktree of the
branch point), with this one's, and with this one's without ``process_memory.return_freed_memory``
(glibc's mallopt left at its default: a sitecustomize replaces it by a no-op). The contenders
alternate RUNS times; medians of CPU seconds (the whole ``wattline run`` process tree) and the
largest peak RSS (``run_measured``'s polling, and ``--timings``' per-asset peak) are reported.

    python -m bench.series_step --gpus 8 --hours 2 --runs 3 --before /work/wt/tmp-main
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from bench.event_time import BIN, DATE, asset_peaks, asset_times, tile_arguments, write_data
from bench.measure import run_measured

SERIES = ["power_1s", "power_100ms", "energy_curve"]
NO_MALLOPT = """import pipeline.process_memory as _pm
_pm.return_freed_memory = lambda: False
"""


def main() -> None:
    ap = tile_arguments(__doc__.splitlines()[0], hours=2.0)
    args = ap.parse_args()
    data_dir = args.work / f"gpus-{args.gpus}-h{args.hours:g}"
    if not (data_dir / "power").exists():
        print(f"wrote {write_data(data_dir, args.gpus, args.hours)} power rows", flush=True)
    here = str(Path(__file__).resolve().parent.parent)
    patch = args.work / "no-mallopt"
    patch.mkdir(parents=True, exist_ok=True)
    (patch / "sitecustomize.py").write_text(NO_MALLOPT)
    os.environ.pop("WATTLINE_DUCKDB_THREADS", None)
    contenders = [("after", {"PYTHONPATH": here}), ("after-no-mallopt", {"PYTHONPATH": f"{patch}:{here}"})]
    if args.before:
        contenders.insert(0, ("before", {"PYTHONPATH": str(args.before)}))
    out: dict = {"gpus": args.gpus, "hours": args.hours, "tables": SERIES, "load_avg_start": os.getloadavg()}
    runs: dict[str, list] = {name: [] for name, _ in contenders}
    for _ in range(args.runs):
        for name, env in contenders:
            m = run_measured(name, [str(BIN / "wattline"), "run", "--date", DATE, "--data-dir", str(data_dir), "--timings",
                                    "--select", ",".join(SERIES)], env=env)
            print(name, f"rc {m.returncode}, cpu {m.cpu_s:.1f} s, wall {m.wall_s:.1f} s, rss {m.peak_rss_mb:.0f} MB", flush=True)
            if m.returncode != 0:
                print(m.stdout[-3000:], flush=True)
                continue
            runs[name].append(m)
            done = runs[name]
            out[name] = {"cpu_s_median": statistics.median(r.cpu_s for r in done), "cpu_s": [r.cpu_s for r in done],
                         "peak_rss_mb": max(r.peak_rss_mb for r in done), "wall_s": [r.wall_s for r in done],
                         "asset_wall_s": asset_times(done[-1].stdout), "asset_peak_rss_mb": asset_peaks(done[-1].stdout)}
    out["load_avg_end"] = os.getloadavg()
    text = json.dumps(out, indent=1, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
