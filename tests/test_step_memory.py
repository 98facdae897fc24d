"""power_cap_whatif and energy_per_token build a slice of the demo fleet's day (its first 3 h)
under low DuckDB bounds a cluster-day. power_cap_whatif streams its weighted GPU-seconds into the
per-cap aggregate and takes its medians from a histogram of the limits: a temp table of every
weighted second and median() over all of them ran out of DuckDB memory here under 128 MB (and on
the demo's whole day under 512 MiB and 1 GiB); it now builds under 96 MB. energy_per_token's
bound is set by its latency quantiles (every request's figures held once per bucket kind, which
DuckDB cannot spill): 96 MB is too little for it, before and after its requests stream into
their buckets."""

from dataclasses import replace

import pytest

from collectors.settings import load
from collectors.simulate import simulate
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY

DATE = DAY.isoformat()
INPUTS = ["power_1s", "power_100ms", "energy_curve", "phase_intervals", "phase_segments", "phase_timeline", "request_energy"]
BOUNDS = {"power_cap_whatif": "96MB", "energy_per_token": "256MB"}


@pytest.mark.slow  # simulates 3 h of 48 GPUs and builds the phases they need (about a minute on 2 busy cores)
def test_cap_whatif_and_energy_per_token_build_under_a_low_duckdb_bound(tmp_path):
    data_dir = tmp_path / "data"
    simulate(data_dir, start=DAY, fleet="demo", hours=3, seed=0)
    inputs = run_day(data_dir, DATE, selection=INPUTS, fleet_day=False)
    assert inputs.success, inputs.error

    for table, bound in BOUNDS.items():
        bounded = run_day(data_dir, DATE, selection=[table], fleet_day=False, settings=replace(load(), duckdb_memory=bound))
        assert bounded.success, f"{table} under {bound}: {bounded.error}"

    caps = read_day(data_dir, "power_cap_whatif", DATE)
    clusters = {e for level, e in zip(caps["level"].to_pylist(), caps["entity"].to_pylist(), strict=True) if level == "cluster"}
    assert clusters == {"train-c0", "infer-c0", "infer-c1"}
    per_token = read_day(data_dir, "energy_per_token", DATE)
    assert len(set(per_token["endpoint"].to_pylist())) == 8
