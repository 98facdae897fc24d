"""energy_per_token where a figure could round the wrong way: a hand-built day with known answers.

One endpoint on one GPU at a constant 300 W for 120 s, its limit reported as 700 W in the first
minute and 500 W after; four requests, one of which answered with 0 output tokens, one whose
decode runs across the limit change and one whose token counts are not logged:
- r1: prefill 10–11 s, decode 11–20 s, 100 output tokens;
- r2: prefill 30–31 s, decode 31–40 s, 0 output tokens (a decode of nothing: no token to count);
- r3: prefill 50–51 s, decode 51–70 s, 190 output tokens (10 per second, 90 of them before 60 s);
- r4: prefill 80–81 s, decode 81–90 s, prompt and output tokens not logged (NULL).
Requests do not overlap, so each one's prefill J is 300 W × 1 s and its decode J 300 W × its decode.

A second endpoint ``f`` holds GPU 1 except from 40 s to 80 s (an endpoint ``other`` has it then),
and its one request (50–60 s) runs while it holds no GPU: nothing was measured for it.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from collectors.contract import REQUESTS
from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.readonly import connect_readonly
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.phase_fixtures import T0

DATE = DAY.isoformat()
FAILED_CHECKS: list = []
DATA_DIRS: list = []
S = 1_000_000_000
SECONDS = 120
POWER_W = 300.0
ASSETS = ["power_1s", "energy_curve", "power_100ms", "phase_timeline", "phase_intervals", "phase_segments",
          "request_energy", "energy_per_token"]
# request_id: (prefill start, first token, end) in s after T0, output tokens
REQS = {"r1": (10, 11, 20, 100), "r2": (30, 31, 40, 0), "r3": (50, 51, 70, 190), "r4": (80, 81, 90, None)}


def _utc(s: int) -> dt.datetime:
    return dt.datetime.fromtimestamp((T0 + s * S) / 1e9, dt.UTC)


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("exact") / "data"
    d.mkdir(parents=True)
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference",
        "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H100"}, {"index": 1, "tdp_w": 700.0, "model": "H100"}],
        "endpoints": [{"name": "e", "gpus": [0], "model": "m", "tp": 1}, {"name": "f", "gpus": [1]}, {"name": "other", "gpus": []}],
    }]}]}],
        "assignments": [{"host": "infer-0", "gpu": 1, "endpoint": "other", "from_ts": _utc(40), "to_ts": _utc(80)},
                        {"host": "infer-0", "gpu": 1, "endpoint": "f", "from_ts": _utc(80)}]}
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")
    t = T0 + np.arange(SECONDS * 10 + 1, dtype=np.int64) * 100_000_000
    table = power_table("infer-0", 0, t, np.full(len(t), POWER_W))
    limit = np.where(t < T0 + 60 * S, 700.0, 500.0).astype(np.float32)
    table = table.set_column(table.schema.get_field_index("power_limit_w"), "power_limit_w", pa.array(limit))
    write_dataset(table, d, "power", prefix="g0")
    write_dataset(power_table("infer-0", 1, t, np.full(len(t), POWER_W)), d, "power", prefix="g1")
    ts = pa.timestamp("ns", tz="UTC")
    rows = [dict(request_id=rid, endpoint="e", arrival_ts=T0 + a * S, prefill_start_ts=T0 + a * S,
                 first_token_ts=T0 + f * S, end_ts=T0 + b * S, prompt_tokens=None if out is None else 50,
                 output_tokens=out, status="ok")
            for rid, (a, f, b, out) in REQS.items()]
    rows.append(dict(request_id="f1", endpoint="f", arrival_ts=T0 + 50 * S, prefill_start_ts=T0 + 50 * S,
                     first_token_ts=T0 + 51 * S, end_ts=T0 + 60 * S, prompt_tokens=50, output_tokens=10, status="ok"))
    cols = {f.name: [r.get(f.name) for r in rows] for f in REQUESTS}
    write_dataset(pa.table({k: pa.array(v, pa.int64()).cast(ts) if k.endswith("_ts") else v for k, v in cols.items()}).cast(REQUESTS),
                  d, "requests", prefix="req")
    outcome = run_day(d, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    FAILED_CHECKS[:] = outcome.failed_checks
    DATA_DIRS[:] = [d]
    con = duckdb.connect()
    con.register("energy_per_token", read_day(d, "energy_per_token", DATE))
    con.register("request_energy", read_day(d, "request_energy", DATE))
    return con


def _row(con, kind: str, bucket: str, endpoint: str = "e") -> dict:
    cur = con.execute("SELECT * FROM energy_per_token WHERE endpoint = ? AND bucket_kind = ? AND bucket = ?", [endpoint, kind, bucket])
    names = [c[0] for c in cur.description]
    (row,) = cur.fetchall()
    return dict(zip(names, row, strict=True))


def test_a_decode_of_zero_tokens_counts_zero_tokens(day):
    busy_s = 10 + 10 + 20  # GPU-seconds with a request in flight (1 GPU) whose output tokens are known (not r4's)
    got = _row(day, "all", "all")
    assert got["output_tokens_per_s_per_gpu"] == pytest.approx((100 + 0 + 190) / busy_s, rel=1e-12)
    assert got["output_tokens"] == 290


def test_the_power_limit_bucket_splits_at_the_change(day):
    """The limit changes at 60 s, inside r3's decode: the part before goes to 700 W, the rest to 500 W."""
    cap700, cap500 = _row(day, "power_limit", "700 W"), _row(day, "power_limit", "500 W")
    assert cap700["energy_j"] == pytest.approx(POWER_W * 60, rel=1e-9)
    assert cap500["energy_j"] == pytest.approx(POWER_W * (SECONDS - 60), rel=1e-9)
    assert cap700["covered_gpu_h"] == pytest.approx(60 / 3600, rel=1e-9)
    # busy before 60 s: r1 10 s + r2 10 s + r3 10 s, tokens 100 + 0 + 90; after: 10 s of r3 (100 tokens),
    # and r4's 10 s, whose tokens are unknown (left out, not counted as 0 tokens)
    assert cap700["output_tokens_per_s_per_gpu"] == pytest.approx((100 + 90) / 30, rel=1e-9)
    assert cap500["output_tokens_per_s_per_gpu"] == pytest.approx(100 / 10, rel=1e-9)
    assert cap700["decode_mean_w"] == pytest.approx(POWER_W, rel=1e-9) and cap500["decode_mean_w"] == pytest.approx(POWER_W, rel=1e-9)
    # each request stays in the bucket of the limit at its prefill start
    assert (cap700["requests"], cap500["requests"]) == (3, 1)


def test_token_counts_not_logged_stay_null(day):
    """r4's counts are unknown: NULL in request_energy, and its joules are not spread over the others' tokens."""
    r4 = day.execute("""SELECT prompt_tokens, output_tokens, j_per_prompt_token, j_per_output_token, tpot_ms, decode_j
                        FROM request_energy WHERE request_id = 'r4'""").fetchone()
    assert r4[:5] == (None, None, None, None, None) and r4[5] == pytest.approx(POWER_W * 9, rel=1e-9)
    got = _row(day, "all", "all")
    assert got["j_per_output_token"] == pytest.approx(POWER_W * (9 + 9 + 19) / 290, rel=1e-9)
    assert got["j_per_prompt_token"] == pytest.approx(POWER_W * 3 / 150, rel=1e-9)
    assert got["prompt_tokens"] == 150
    assert _row(day, "output_len", "unknown")["requests"] == 1 and _row(day, "prompt_len", "unknown")["requests"] == 1


def test_a_bucket_with_no_gpu_held_has_no_energy_not_zero(day):
    """f's only request runs while f holds no GPU: its batch bucket's energy is unknown (NULL), not 0 J."""
    batch = _row(day, "batch_size", "1", "f")
    assert batch["requests"] == 1
    assert batch["energy_j"] is None
    assert _row(day, "all", "all", "f")["energy_j"] == pytest.approx(POWER_W * 80, rel=1e-9)  # the 80 s it held GPU 1


def test_a_request_while_its_endpoint_holds_no_gpu_has_no_energy(day):
    """f1 runs 50-60 s; f holds GPU 1 only from 80 s: nothing of f was measured while it ran, so its
    coverage is 0 and its energies NULL (not 1.0 and 0 J, which read as a free request)."""
    got = day.execute("SELECT power_coverage, prefill_j, decode_j, total_j, j_per_output_token FROM request_energy "
                      "WHERE request_id = 'f1'").fetchone()
    assert got == (0.0, None, None, None, None)
    batch = _row(day, "batch_size", "1", "f")
    assert batch["j_per_output_token"] is None and batch["j_per_prompt_token"] is None
    # an assignment, not a clock: the coverage WARN says so, and no ERROR blocks the day
    warned = {c.check: c for c in FAILED_CHECKS if c.asset == "request_energy"}
    assert "requests_meet_power" not in warned
    assert "1 ran while f held no GPU" in warned["power_coverage"].description


def test_length_buckets_of_a_count_not_logged_read_unknown_in_ad_hoc_sql(day):
    """The catalog's bucket macros give 'unknown' for NULL (they put it in the top bucket)."""
    con = connect_readonly(DATA_DIRS[0])
    got = con.execute("SELECT prompt_len_bucket(NULL), output_len_bucket(NULL), prompt_len_bucket(20000), output_len_bucket(2000)").fetchone()
    assert got == ("unknown", "unknown", "16k+", "1k+")
