"""energy_per_token along the serving axes, with latency: a hand-built day whose answers are known.

Three endpoints on one host at constant power per GPU (so every interval's energy is P × GPUs × its
duration), with overlapping requests at irregular nanosecond times:
- ``a``: Llama 8B, tp 1 on 2 GPUs (2 replicas), prefill starts logged, limit reported in the power
  rows: 700 W in the first minute, 500 W after;
- ``b``: Qwen 8B, tp 2 on 2 GPUs (1 replica), prefill starts not logged, the inventory's 450 W limit;
- ``c``: no model keys, 1 GPU, no limit anywhere (TDP).
Every figure is compared with an independent computation in numpy/Python (tests/phase_reference.py
for the attribution rule).
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.phase_fixtures import T0
from tests.phase_reference import Request, attribute

DATE = DAY.isoformat()
SECONDS = 180
POWER_W = {"a": 250.0, "b": 300.0, "c": 200.0}
GPUS = {"a": [0, 1], "b": [2, 3], "c": [4]}
ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments",
          "request_energy", "energy_per_token"]
S = 1_000_000_000


def _requests(endpoint: str, n: int, seed: int, logged_prefill: bool) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        arrival = T0 + int(rng.uniform(1, SECONDS - 40) * S) + int(rng.integers(0, 999))
        queue = int(rng.uniform(0.001, 0.08) * S)
        prefill = int(rng.uniform(0.02, 0.3) * S)
        out = int(rng.integers(1, 300)) if i % 7 else 1  # some one-token answers: no time per output token
        end = arrival + queue + prefill + int(out * rng.uniform(0.01, 0.03) * S) + 1
        rows.append(dict(request_id=f"{endpoint}{i}", endpoint=endpoint, arrival_ts=arrival,
                         prefill_start_ts=arrival + queue if logged_prefill else None,
                         first_token_ts=arrival + queue + prefill, end_ts=end,
                         prompt_tokens=int(rng.integers(10, 3000)), output_tokens=out,
                         status="error" if i % 11 == 5 else "ok",
                         max_tokens=[None, 128, 512, 2048][i % 4]))
    return rows


def _table(rows: list[dict]) -> pa.Table:
    ts = pa.timestamp("ns", tz="UTC")
    cols = {f.name: [r.get(f.name) for r in rows] for f in REQUESTS}
    return pa.table({k: pa.array(v, pa.int64()).cast(ts) if k.endswith("_ts") else v for k, v in cols.items()}).cast(REQUESTS)


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("serving") / "data"
    gpus = [{"index": g, "tdp_w": 700.0, "model": "H100"} for g in (0, 1)]
    gpus += [{"index": g, "tdp_w": 700.0, "model": "H200", "power_limit_w": 450.0} for g in (2, 3)]
    gpus += [{"index": 4, "tdp_w": 700.0, "model": "H200"}]
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference", "gpus": gpus,
        "endpoints": [
            {"name": "a", "gpus": GPUS["a"], "model": "meta-llama/Llama-3.1-8B", "params_b": 8, "precision": "bf16", "tp": 1},
            {"name": "b", "gpus": GPUS["b"], "model": "Qwen/Qwen3-8B", "params_b": 8.2, "precision": "fp8", "tp": 2},
            {"name": "c", "gpus": GPUS["c"]},
        ],
    }]}]}]}
    d.mkdir(parents=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    t = T0 + np.arange(SECONDS * 10 + 1, dtype=np.int64) * 100_000_000
    for ep, gs in GPUS.items():
        for g in gs:
            table = power_table("infer-0", g, t, np.full(len(t), POWER_W[ep]))
            if ep == "a":
                limit = np.where(t < T0 + 60 * S, 700.0, 500.0).astype(np.float32)
                table = table.set_column(table.schema.get_field_index("power_limit_w"), "power_limit_w", pa.array(limit))
            write_dataset(table, d, "power", prefix=f"g{g}")
    reqs = {"a": _requests("a", 40, 1, True), "b": _requests("b", 25, 2, False), "c": _requests("c", 3, 3, True)}
    write_dataset(_table([r for rows in reqs.values() for r in rows]), d, "requests", prefix="req")
    outcome = run_day(d, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("energy_per_token", read_day(d, "energy_per_token", DATE))
    con.register("request_energy", read_day(d, "request_energy", DATE))
    return con, reqs


def _row(con, endpoint: str, kind: str, bucket: str) -> dict:
    cur = con.execute("SELECT * FROM energy_per_token WHERE endpoint = ? AND bucket_kind = ? AND bucket = ?", [endpoint, kind, bucket])
    names = [c[0] for c in cur.description]
    (row,) = cur.fetchall()
    return dict(zip(names, row, strict=True))


def _pct(values, q):
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def _latency(rows: list[dict]) -> dict:
    ok = [r for r in rows if r["status"] == "ok"]
    ttft = [(r["first_token_ts"] - r["arrival_ts"]) / 1e6 for r in ok]
    queue = [(r["prefill_start_ts"] - r["arrival_ts"]) / 1e6 for r in ok if r["prefill_start_ts"] is not None]
    tpot = [(r["end_ts"] - r["first_token_ts"]) / 1e6 / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] >= 2]
    e2e = [(r["end_ts"] - r["arrival_ts"]) / 1e6 for r in ok]
    return {f"{name}_p{q}_ms": _pct(v, q) for name, v in (("ttft", ttft), ("queue", queue), ("tpot", tpot), ("e2e", e2e))
            for q in (50, 90, 99)}


def _effective(rows: list[dict]) -> list[Request]:
    """The phase rule's requests (a missing prefill start: the later of arrival and the previous prefill's end)."""
    firsts = sorted({r["first_token_ts"] for r in rows})
    out = []
    for r in rows:
        ps = r["prefill_start_ts"]
        if ps is None:
            earlier = [f for f in firsts if f < r["first_token_ts"]]
            ps = min(max(r["arrival_ts"], earlier[-1] if earlier else r["arrival_ts"]), r["first_token_ts"])
        out.append(Request(r["request_id"], ps, r["first_token_ts"], r["end_ts"], r["prompt_tokens"], r["output_tokens"]))
    return out


def _batch_bucket(n: float) -> str | None:
    if n < 1:
        return None
    for hi, label in ((1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (32, "17-32"), (64, "33-64")):
        if n <= hi:
            return label
    return "65+"


@pytest.mark.parametrize("endpoint", ["a", "b", "c"])
def test_latency_and_joules_of_the_day_match_an_independent_computation(day, endpoint):
    con, reqs = day
    rows = reqs[endpoint]
    got = _row(con, endpoint, "all", "all")
    for name, want in _latency(rows).items():
        if want is None:
            assert got[name] is None, name
        else:
            assert got[name] == pytest.approx(want, abs=1e-3), name  # 1 µs
    gpus = len(GPUS[endpoint])
    energy = lambda a, b: POWER_W[endpoint] * gpus * (b - a) / 1e9  # noqa: E731
    charged, _ = attribute(_effective(rows), energy, T0, T0 + SECONDS * S)
    assert got["j_per_output_token"] == pytest.approx(sum(c[1] for c in charged.values()) / sum(r["output_tokens"] for r in rows), rel=1e-9)
    assert got["j_per_prompt_token"] == pytest.approx(sum(c[0] for c in charged.values()) / sum(r["prompt_tokens"] for r in rows), rel=1e-9)
    # output tokens per second per GPU: every output token over the GPU-seconds when any request ran
    spans = sorted((r.prefill_start_ns, r.end_ns) for r in _effective(rows))
    busy, lo, hi = 0, *spans[0]
    for a, b in spans[1:]:
        if a > hi:
            busy, lo, hi = busy + hi - lo, a, b
        else:
            hi = max(hi, b)
    busy += hi - lo
    assert got["output_tokens_per_s_per_gpu"] == pytest.approx(sum(r["output_tokens"] for r in rows) / (busy / 1e9 * gpus), rel=1e-9)
    assert got["requests_with_queue_time"] == (sum(r["status"] == "ok" for r in rows) if endpoint != "b" else 0)


def test_endpoint_keys_on_every_row_and_the_new_axes(day):
    con, reqs = day
    keys = con.execute("""SELECT endpoint, count(DISTINCT (model, params_b, precision, tp, pp, gpus_per_replica, replicas, gpu_model)),
                                 any_value(model), any_value(params_b), any_value(precision), any_value(tp), any_value(pp),
                                 any_value(gpus_per_replica), any_value(replicas), any_value(gpu_model)
                          FROM energy_per_token GROUP BY ALL ORDER BY ALL""").fetchall()
    assert keys == [("a", 1, "meta-llama/Llama-3.1-8B", 8.0, "bf16", 1, None, 1, 2, "H100"),
                    ("b", 1, "Qwen/Qwen3-8B", 8.2, "fp8", 2, None, 2, 1, "H200"),
                    ("c", 1, None, None, None, None, None, None, 1, "H200")]
    assert _row(con, "a", "model", "meta-llama/Llama-3.1-8B")["requests"] == 40
    assert _row(con, "c", "model", "unknown")["requests"] == 3
    assert _row(con, "b", "gpus_per_replica", "2")["requests"] == 25
    assert _row(con, "c", "gpus_per_replica", "unknown")["energy_j"] == pytest.approx(POWER_W["c"] * SECONDS, rel=1e-9)
    # max_tokens: the request's requested length; NULL → 'unknown'
    buckets = dict(con.execute("SELECT bucket, requests FROM energy_per_token WHERE endpoint = 'a' AND bucket_kind = 'max_tokens'").fetchall())
    assert buckets == {"unknown": 10, "≤256": 10, "257-1024": 10, "1025-4096": 10}
    row = _row(con, "a", "max_tokens", "257-1024")
    assert row["ttft_p50_ms"] == pytest.approx(_latency([r for r in reqs["a"] if r["max_tokens"] == 512])["ttft_p50_ms"], abs=1e-3)
    assert row["energy_j"] is None and row["output_tokens_per_s_per_gpu"] is None  # a request axis: no interval time


def test_power_limit_is_the_limit_in_force_per_interval_and_request(day):
    con, reqs = day
    rows = reqs["a"]
    eff = {r.request_id: r for r in _effective(rows)}
    before = [r for r in rows if eff[r["request_id"]].prefill_start_ns < T0 + 60 * S]
    cap700, cap500 = _row(con, "a", "power_limit", "700 W"), _row(con, "a", "power_limit", "500 W")
    assert (cap700["requests"], cap500["requests"]) == (len(before), len(rows) - len(before))
    assert cap700["ttft_p50_ms"] == pytest.approx(_latency(before)["ttft_p50_ms"], abs=1e-3)
    # the intervals are split at the change (the minute): the first minute's GPU time is the 700 W bucket's
    assert cap700["energy_j"] == pytest.approx(POWER_W["a"] * 2 * 60, rel=1e-9)
    assert cap500["energy_j"] == pytest.approx(POWER_W["a"] * 2 * (SECONDS - 60), rel=1e-9)
    assert (cap700["power_limit_w"], cap700["power_limit_source"]) == (700.0, "power")
    everything = _row(con, "a", "all", "all")
    assert everything["power_limit_w"] is None and everything["power_limit_source"] == "power"  # two limits that day
    b, c = _row(con, "b", "power_limit", "450 W"), _row(con, "c", "power_limit", "700 W")
    assert (b["requests"], b["power_limit_source"], _row(con, "b", "all", "all")["power_limit_w"]) == (25, "inventory", 450.0)
    assert (c["requests"], c["power_limit_source"]) == (3, "tdp")
    # by model × gpus_per_replica × batch × GPU model × power limit: one query over the columns
    combos = con.execute("""SELECT model, gpus_per_replica, bucket, gpu_model, power_limit_w, sum(requests)
                            FROM energy_per_token WHERE bucket_kind = 'batch_size' AND endpoint = 'b' GROUP BY ALL""").fetchall()
    assert sum(c[-1] for c in combos) == 25 and {c[4] for c in combos} == {450.0}


def test_batch_size_is_per_replica(day):
    """a: 2 replicas, so concurrency ÷ 2 (an estimate: the replica is not logged); b: 1 replica."""
    con, reqs = day
    for endpoint, replicas in (("a", 2), ("b", 1)):
        eff = _effective(reqs[endpoint])
        want: dict[str, int] = {}
        for r in eff:  # mean requests in flight over its life (itself included), per replica, rounded half up
            dur = r.end_ns - r.prefill_start_ns
            mean = sum(max(0, min(r.end_ns, o.end_ns) - max(r.prefill_start_ns, o.prefill_start_ns)) for o in eff) / dur
            label = _batch_bucket(max(math.floor(mean / replicas + 0.5), 1))
            want[label] = want.get(label, 0) + 1
        got = con.execute("""SELECT bucket, requests, batch_per_replica_estimated FROM energy_per_token
                             WHERE endpoint = ? AND bucket_kind = 'batch_size' AND requests > 0""", [endpoint]).fetchall()
        assert {b: n for b, n, _ in got} == want
        assert {e for *_, e in got} == {replicas > 1}
        # the intervals: GPU energy at each per-replica concurrency (requests active ÷ replicas, rounded up)
        cuts = sorted({T0, T0 + SECONDS * S} | {x for r in eff for x in (r.prefill_start_ns, r.first_token_ns, r.end_ns)})
        energy: dict[str, float] = {}
        for x, y in zip(cuts, cuts[1:], strict=False):
            n = sum(r.prefill_start_ns <= x and y <= r.end_ns for r in eff)
            label = _batch_bucket(math.ceil(n / replicas))
            if label:
                energy[label] = energy.get(label, 0.0) + POWER_W[endpoint] * 2 * (y - x) / 1e9
        got_j = dict(con.execute("""SELECT bucket, energy_j FROM energy_per_token
                                    WHERE endpoint = ? AND bucket_kind = 'batch_size' AND energy_j IS NOT NULL""", [endpoint]).fetchall())
        assert got_j.keys() == energy.keys()
        for k, v in energy.items():
            assert got_j[k] == pytest.approx(v, rel=1e-9), k


def test_request_energy_carries_each_requests_latency(day):
    con, reqs = day
    got = {r[0]: r[1:] for r in con.execute("SELECT request_id, max_tokens, ttft_ms, queue_ms, tpot_ms, e2e_ms FROM request_energy").fetchall()}
    for r in reqs["a"] + reqs["b"]:
        max_tokens, ttft, queue, tpot, e2e = got[r["request_id"]]
        assert max_tokens == r["max_tokens"]
        assert ttft == pytest.approx((r["first_token_ts"] - r["arrival_ts"]) / 1e6, abs=1e-6)
        assert e2e == pytest.approx((r["end_ts"] - r["arrival_ts"]) / 1e6, abs=1e-6)
        assert (queue is None) == (r["prefill_start_ts"] is None)
        assert (tpot is None) == (r["output_tokens"] < 2)


def test_capture_4_latency_equals_the_logged_requests(capture_4_day):
    """The real H200 capture (continuous batching, 368 requests) with its model keys set: TTFT and time
    per output token from the table equal those computed from requests.csv directly."""
    import polars as pl

    from tests.test_phases_event_time_real import CAPTURE_4

    d, date = capture_4_day.data_dir, capture_4_day.date
    assert set(ASSETS) <= capture_4_day.tables(), capture_4_day.outcome.materialized
    con = duckdb.connect()
    con.register("energy_per_token", read_day(d, "energy_per_token", date))
    got = _row(con, "llm-8b-cb-0", "all", "all")
    csv = pl.read_csv(CAPTURE_4 / "requests.csv")
    ttft = ((csv["first_token_ns"] - csv["arrival_ns"]) / 1e6).to_numpy()
    many = csv.filter(pl.col("output_tokens") >= 2)
    tpot = ((many["end_ns"] - many["first_token_ns"]) / 1e6 / (many["output_tokens"] - 1)).to_numpy()
    queue = ((csv["prefill_start_ns"] - csv["arrival_ns"]) / 1e6).to_numpy()
    e2e = ((csv["end_ns"] - csv["arrival_ns"]) / 1e6).to_numpy()
    for name, values in (("ttft", ttft), ("tpot", tpot), ("queue", queue), ("e2e", e2e)):
        for q in (50, 90, 99):
            assert got[f"{name}_p{q}_ms"] == pytest.approx(float(np.percentile(values, q)), abs=1e-3), (name, q)
    assert (got["requests"], got["model"], got["gpus_per_replica"], got["power_limit_w"]) == (368, "llama-8b", 1, 700.0)
    assert got["power_limit_source"] == "power"  # the collector's enforced limit, 700 W (gpu_meta.csv)
    print(f"capture 4: TTFT p50 {got['ttft_p50_ms']:.1f} ms p99 {got['ttft_p99_ms']:.1f} ms, TPOT p50 {got['tpot_p50_ms']:.2f} ms, "
          f"queue p50 {got['queue_p50_ms']:.1f} ms, e2e p50 {got['e2e_p50_ms']:.0f} ms, "
          f"{got['output_tokens_per_s_per_gpu']:.0f} output tokens/s/GPU, {got['j_per_output_token']:.4f} J/output token")
