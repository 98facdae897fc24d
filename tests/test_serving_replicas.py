"""energy_per_token's batch size per replica where the request log names the replica: a hand-built day
whose answers are known.

One host, constant power per GPU (an interval's energy is P × GPUs × its duration), four endpoints of
two GPUs whose requests overlap at irregular nanosecond times:
- ``x``: tp 1 (2 replicas), every request names its replica; ``x-0`` carries many long requests,
  ``x-1`` a few short ones: the exact per-replica batch differs from concurrency ÷ 2;
- ``y``: the same traffic without replica ids: the estimate (concurrency ÷ 2), flagged;
- ``z``: the same traffic, only some requests name their replica: the estimate, flagged;
- ``w``: no tp in the inventory (replicas unknown), every request names one of two replicas: exact,
  the intervals split over the two replica ids;
- ``v``: as ``x`` without logged prefill starts: each is estimated from the previous prefill on the
  request's own replica (replicas prefill in parallel), not on the whole endpoint.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.phase_fixtures import T0
from tests.test_serving_energy import _batch_bucket, _table

DATE = DAY.isoformat()
SECONDS = 120
S = 1_000_000_000
POWER_W = 300.0
GPUS = {"x": [0, 1], "y": [2, 3], "z": [4, 5], "w": [6, 7], "v": [8, 9]}
ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments",
          "request_energy", "energy_per_token"]


def _traffic(endpoint: str) -> list[dict]:
    """Replica 0: 24 requests of 8–20 s (heavy overlap); replica 1: 5 requests of 0.5–2 s."""
    rng = np.random.default_rng(7)  # the same traffic on every endpoint
    rows = []
    for replica, n, lo_s, hi_s in ((0, 24, 8.0, 20.0), (1, 5, 0.5, 2.0)):
        for i in range(n):
            arrival = T0 + int(rng.uniform(1, SECONDS - 25) * S) + int(rng.integers(0, 999))
            prefill = int(rng.uniform(0.05, 0.3) * S)
            end = arrival + 1000 + prefill + int(rng.uniform(lo_s, hi_s) * S)
            rid = f"{endpoint}{replica}-{i}"
            named = {"y": None, "z": f"{endpoint}-{replica}" if i % 2 else None}.get(endpoint, f"{endpoint}-{replica}")
            rows.append(dict(request_id=rid, endpoint=endpoint, arrival_ts=arrival,
                             prefill_start_ts=None if endpoint == "v" else arrival + 1000,
                             first_token_ts=arrival + 1000 + prefill, end_ts=end, prompt_tokens=int(rng.integers(10, 900)),
                             output_tokens=int(rng.integers(2, 300)), status="ok", max_tokens=None,
                             replica=named, _on=replica))
    if endpoint == "v":  # replica 1's requests arrive 5 ms after replica 0's first ones, with 1 s prefills:
        for k, r in enumerate(r for r in rows if r["_on"] == 1):  # their prefills overlap across replicas
            shift = rows[k]["arrival_ts"] + 5_000_000 - r["arrival_ts"]
            for name in ("arrival_ts", "first_token_ts", "end_ts"):
                r[name] += shift
            r["first_token_ts"] += S
            r["end_ts"] += S
    return rows


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("replicas") / "data"
    gpus = [{"index": g, "tdp_w": 700.0, "model": "H100"} for gs in GPUS.values() for g in gs]
    endpoints = [{"name": ep, "gpus": gs, **({} if ep == "w" else {"tp": 1})} for ep, gs in GPUS.items()]
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference", "gpus": gpus, "endpoints": endpoints}]}]}]}
    d.mkdir(parents=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    t = T0 + np.arange(SECONDS * 10 + 1, dtype=np.int64) * 100_000_000
    for gs in GPUS.values():
        for g in gs:
            write_dataset(power_table("infer-0", g, t, np.full(len(t), POWER_W)), d, "power", prefix=f"g{g}")
    reqs = {ep: _traffic(ep) for ep in GPUS}
    write_dataset(_table([r for rows in reqs.values() for r in rows]), d, "requests", prefix="req")
    outcome = run_day(d, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("energy_per_token", read_day(d, "energy_per_token", DATE))
    return con, reqs


def _estimated(rows: list[dict], per_replica: bool) -> list[dict]:
    """The phase rule's prefill start where none is logged: the later of the arrival and the latest
    earlier first token (on the request's replica, or on the whole endpoint), never after its own."""
    out = []
    for r in rows:
        peers = [o for o in rows if o["_on"] == r["_on"]] if per_replica else rows
        earlier = [o["first_token_ts"] for o in peers if o["first_token_ts"] < r["first_token_ts"]]
        start = min(max(r["arrival_ts"], max(earlier, default=r["arrival_ts"])), r["first_token_ts"])
        out.append({**r, "prefill_start_ts": start})
    return out


def _overlap(r: dict, o: dict) -> int:
    return max(0, min(r["end_ts"], o["end_ts"]) - max(r["prefill_start_ts"], o["prefill_start_ts"]))


def _request_buckets(rows: list[dict], per_replica: bool) -> dict[str, int]:
    """Each request's mean requests in flight over its life (itself included): on its own replica,
    or on the endpoint ÷ 2 replicas; rounded half up."""
    want: dict[str, int] = {}
    for r in rows:
        peers = [o for o in rows if o["_on"] == r["_on"]] if per_replica else rows
        mean = sum(_overlap(r, o) for o in peers) / (r["end_ts"] - r["prefill_start_ts"])
        label = _batch_bucket(max(math.floor((mean if per_replica else mean / 2) + 0.5), 1))
        want[label] = want.get(label, 0) + 1
    return want


def _interval_energy(rows: list[dict], per_replica: bool) -> dict[str, float]:
    """GPU energy by batch: per elementary interval, each replica's own requests in flight with half
    the interval's energy (2 GPUs, 2 replicas), or the endpoint's ÷ 2 rounded up with all of it."""
    cuts = sorted({T0, T0 + SECONDS * S} | {x for r in rows for x in (r["prefill_start_ts"], r["first_token_ts"], r["end_ts"])})
    energy: dict[str, float] = {}
    for x, y in zip(cuts, cuts[1:], strict=False):
        joules = POWER_W * 2 * (y - x) / 1e9
        active = [r for r in rows if r["prefill_start_ts"] <= x and y <= r["end_ts"]]
        if per_replica:
            pieces = [(sum(r["_on"] == k for r in active), joules / 2) for k in (0, 1)]
        else:
            pieces = [(math.ceil(len(active) / 2), joules)]
        for n, j in pieces:
            label = _batch_bucket(n)
            if label:
                energy[label] = energy.get(label, 0.0) + j
    return energy


@pytest.mark.parametrize(("endpoint", "exact"), [("x", True), ("y", False), ("z", False), ("w", True)])
def test_batch_per_replica_is_exact_where_the_log_names_the_replica(day, endpoint, exact):
    con, reqs = day
    rows = reqs[endpoint]
    got = con.execute("""SELECT bucket, requests, energy_j, batch_per_replica_estimated, replicas_logged
                         FROM energy_per_token WHERE endpoint = ? AND bucket_kind = 'batch_size'""", [endpoint]).fetchall()
    assert {b: n for b, n, *_ in got if n} == _request_buckets(rows, per_replica=exact)
    want_j = _interval_energy(rows, per_replica=exact)
    got_j = {b: j for b, _, j, *_ in got if j is not None}
    assert got_j.keys() == want_j.keys()
    for k, v in want_j.items():
        assert got_j[k] == pytest.approx(v, rel=1e-9), k
    assert {e for *_, e, _ in got} == {not exact}
    assert {n for *_, n in got} == {{"x": 2, "y": 0, "z": 2, "w": 2}[endpoint]}


def test_prefill_starts_not_logged_are_estimated_on_the_requests_own_replica(day):
    con, reqs = day
    rows = _estimated(reqs["v"], per_replica=True)
    endpoint_wide = _estimated(reqs["v"], per_replica=False)
    assert _interval_energy(rows, True) != _interval_energy(endpoint_wide, True)  # the two rules differ here
    got = con.execute("""SELECT bucket, requests, energy_j, batch_per_replica_estimated FROM energy_per_token
                         WHERE endpoint = 'v' AND bucket_kind = 'batch_size'""").fetchall()
    assert {b: n for b, n, *_ in got if n} == _request_buckets(rows, per_replica=True)
    want_j = _interval_energy(rows, per_replica=True)
    got_j = {b: j for b, _, j, _ in got if j is not None}
    assert got_j.keys() == want_j.keys()
    for k, v in want_j.items():
        assert got_j[k] == pytest.approx(v, rel=1e-9), k
    assert {e for *_, e in got} == {False}


def test_the_exact_and_the_estimated_endpoints_differ_and_other_axes_do_not(day):
    """The same traffic: its per-replica buckets differ from the estimate's (the test can tell them
    apart), while the axes that do not depend on the replica (all, hour) are the same on x and y."""
    con, reqs = day
    assert _request_buckets(reqs["x"], True) != _request_buckets(reqs["x"], False)
    same = con.execute("""SELECT endpoint, bucket_kind, bucket, requests, energy_j, j_per_output_token, ttft_p50_ms
                          FROM energy_per_token WHERE endpoint IN ('x', 'y') AND bucket_kind IN ('all', 'hour')
                          ORDER BY bucket_kind, bucket, endpoint""").fetchall()
    for a, b in zip(same[::2], same[1::2], strict=True):
        assert a[1:4] == b[1:4] and a[4:] == pytest.approx(b[4:], rel=1e-12)
