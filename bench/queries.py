"""Ad-hoc query latency: five typical `wattline sql` questions, median of repeated runs each."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.measure import save
from pipeline.readonly import ReadOnlyError, run_query

DATE = "2026-11-30"
QUERIES = {
    "top swing events": f"select level, entity, window_s, max_swing_w, max_swing_pct from swing_stats "
                        f"where date = '{DATE}' and series = 'instant' order by max_swing_pct desc limit 10",
    "J per output token by hour": f"select bucket as hour, j_per_output_token from energy_per_token where date = '{DATE}' and bucket_kind = 'hour' "
    "and endpoint = (select min(endpoint) from energy_per_token) order by 1",
    "one GPU 1 s trace, 10 min": f"select ts, mean_w, max_w from power_1s where date = '{DATE}' and host = (select min(host) from power_1s) and gpu = 0 "
                                 f"and ts >= TIMESTAMPTZ '{DATE} 12:00:00+00' and ts < TIMESTAMPTZ '{DATE} 12:10:00+00' order by ts",
    "coincidence per cluster": f"select entity, coincidence_factor, smoothing_ratio from coincidence where date = '{DATE}' and level = 'cluster' order by 1",
    "hourly fleet power": f"select date_trunc('hour', ts) as hour, avg(power_w) as mean_w, max(power_w) as max_w from fleet_power_1s "
                          f"where date = '{DATE}' and level = 'fleet' group by 1 order by 1",
}


def main(data_dir: Path, repeats: int = 5) -> dict:
    results = {}
    for name, sql in QUERIES.items():
        times = []
        try:
            for _ in range(repeats):
                t = time.perf_counter()
                run_query(data_dir, sql)
                times.append(time.perf_counter() - t)
            results[name] = {"median_s": statistics.median(times), "runs": times}
            print(f"{name:<28} median {statistics.median(times) * 1000:8.1f} ms")
        except ReadOnlyError as exc:
            results[name] = {"error": str(exc)}
            print(f"{name:<28} not available: {exc}")
    print(f"written {save('queries', {'data_dir': str(data_dir), 'results': results})}")
    return results
