"""phase_segments counts what it says: per-GPU rows stay (each GPU's own energy), and
`endpoint_segment` numbers the endpoint-level runs, so one prefill on a tensor-parallel-2 endpoint
is one prefill, not two."""

import duckdb
import numpy as np
import pytest
import yaml

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.phase_fixtures import P_DEC, P_IDLE, P_PRE, T0, requests_table

DATE = DAY.isoformat()
# six requests, prefills apart from each other: 0.3 s prefill, 1.5 s decode, every 5 s from 10 s
REQUESTS = {f"r{k}": (10.0 + 5 * k, 10.0 + 5 * k, 10.3 + 5 * k, 11.8 + 5 * k, 100, 20) for k in range(6)}


@pytest.mark.slow  # runs the daily job on a day of its own
def test_tp2_endpoint_counts_each_prefill_once(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference",
        "gpus": [{"index": i, "tdp_w": 700.0, "model": "H200"} for i in range(2)],
        "endpoints": [{"name": "ep-a", "gpus": [0, 1], "tp": 2}],
    }]}]}]}
    (d / "inventory.yaml").write_text(yaml.safe_dump(inv))
    t_s = np.arange(600) * 0.1 + 0.05
    power = np.full(600, P_IDLE)
    for arrival, _, first, end, _, _ in REQUESTS.values():
        power[(t_s >= arrival) & (t_s < first)] = P_PRE
        power[(t_s >= first) & (t_s < end)] = P_DEC
    t = T0 + np.round(t_s * 1e9).astype(np.int64)
    for gpu in range(2):
        write_dataset(power_table("infer-0", gpu, t, power), d, "power", prefix=f"p{gpu}")
    write_dataset(requests_table(REQUESTS), d, "requests", prefix="r")
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "phase_intervals",
                                          "phase_segments", "phase_timeline", "request_energy", "energy_per_token"])
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("s", read_day(d, "phase_segments", DATE))
    gpu_rows, endpoint_level = con.execute(
        "SELECT count(*), count(DISTINCT endpoint_segment) FROM s WHERE source = 'requests' AND phase = 'prefill'"
    ).fetchall()[0]
    request_side = len(REQUESTS)  # prefills that neither overlap nor touch: one endpoint-level run each
    assert (gpu_rows, endpoint_level) == (2 * request_side, request_side)
    # each endpoint-level run holds one row per GPU of the replica, at the same instants
    per_run = con.execute("SELECT endpoint_segment, count(*), count(DISTINCT gpu), count(DISTINCT start_ts) FROM s "
                          "WHERE source = 'requests' AND phase = 'prefill' GROUP BY 1 ORDER BY 1").fetchall()
    assert per_run == [(k, 2, 2, 1) for k in range(1, request_side + 1)]
    # power-only runs overlap across the two GPUs the same way
    assert con.execute("SELECT count(DISTINCT endpoint_segment) FROM s WHERE source = 'power' AND phase = 'prefill'"
                       ).fetchall()[0][0] == request_side
    # the rate of prefills above TDP (P_PRE = 800 W > 700 W) is over the covered time, shown beside it:
    # 60 s of power on 2 GPUs, 12 per-GPU rows above TDP
    con.register("e", read_day(d, "energy_per_token", DATE))
    rate, covered = con.execute("SELECT tdp_exceedances, covered_gpu_h FROM e WHERE bucket_kind = 'all'").fetchall()[0]
    assert 2 * 59.8 / 3600 <= covered <= 2 * 60 / 3600  # slots with power, not the 24 h of the day
    assert abs(rate * covered - 2 * request_side) < 1e-9
