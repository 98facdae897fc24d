"""No silent zeros: a request without power samples has NULL energies (request_energy.power_coverage
says how much of it had samples), and an endpoint whose requests never meet its power is an ERROR
whose message estimates the clock offset between them (pipeline/phases/coverage.py).

Real data: the A100 vLLM smoke runs (tests/data/phases/vllm-a100-smoke, SOURCE.md there): power
logged by nvidia-smi in local wall time of a UTC−7 zone, requests in Unix time."""

import datetime as dt
import json

import duckdb
import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table
from tests.cli_util import invoke
from tests.days import builds_a_day
from tests.phase_fixtures import P_DEC, P_DEC2, P_IDLE, P_PRE, REQUESTS_S, T0, endpoint_inventory, requests_table, slot_labels
from tests.phase_real import DATA

SMOKE = DATA / "vllm-a100-smoke"
SMOKE_DAY = "2026-07-18"
PHASE_ASSETS = "power_1s,energy_curve,power_100ms,phase_intervals,phase_timeline,phase_segments,request_energy,energy_per_token"
TRUE_OFFSET_S = 7 * 3600
# request_energy.total_j (J) of each smoke run imported with --tz -07:00: the values main computed
# before NULLs existed (measured on main at daf3eaf), which full coverage must keep
MAIN_TOTAL_J = {
    "run-1784415083": [228.8554958637941, 291.36543064102574, 1207.3842601413826, 346.9007049387593],
}


def _smoke_day(tmp_path, run: str, *tz: str):
    """The real CLI: an inventory with endpoint qwen3-8b on infer-0, `import nvidia-smi` with TZ=UTC
    and --power-draw instant (plus ``tz``), `ingest requests --format vllm-bench`, `run`."""
    d = tmp_path / "data"
    endpoint_inventory(d, endpoint="qwen3-8b", gpus=1, tdp_w=400.0, model="A100")
    imp = invoke("import", "nvidia-smi", str(SMOKE / run / "power.csv"), "--host", "infer-0", "--power-draw", "instant",
                 *tz, "--data-dir", str(d), env={"TZ": "UTC"})
    assert imp.exit_code == 0, imp.output
    ing = invoke("ingest", "requests", "--format", "vllm-bench", str(SMOKE / run / "requests.json"), "--endpoint", "qwen3-8b",
                 "--data-dir", str(d))
    assert ing.exit_code == 0, ing.output
    run_out = invoke("run", "--date", SMOKE_DAY, "--select", PHASE_ASSETS, "--data-dir", str(d))
    con = duckdb.connect()
    for name in ("request_energy", "energy_per_token"):
        con.register(name, read_day(d, name, SMOKE_DAY))
    return imp.output, run_out, con


@pytest.mark.slow  # runs the daily job (the phase tables) on a day of its own
@pytest.mark.parametrize("run", ["run-1784415083", "run-1784415161"])
def test_smoke_without_tz_is_null_and_an_error_with_the_offset(tmp_path, run):
    """Power read as UTC lands 7 h before the requests on the same UTC day: no 0 J anywhere, and an
    ERROR naming the endpoint with an offset within one sample interval (250 ms) of 7 h."""
    imported, out, con = _smoke_day(tmp_path, run)
    assert "timestamps had no zone: read as UTC" in imported and "no --tz given" in imported
    assert out.exit_code == 1, out.output  # an ERROR check failed
    energies = con.execute("SELECT prefill_j, decode_j, total_j, j_per_prompt_token, j_per_output_token, power_coverage FROM request_energy").fetchall()
    assert len(energies) == 4
    assert all(row[:5] == (None,) * 5 and row[5] == 0 for row in energies), energies
    ept = con.execute("SELECT j_per_prompt_token, j_per_output_token, j_per_request, requests, requests_with_power "
                      "FROM energy_per_token WHERE bucket_kind = 'all'").fetchall()
    assert ept == [(None, None, None, 4, 0)]
    zero = con.execute("SELECT count(*) FROM request_energy WHERE 0 IN (prefill_j, decode_j, total_j)").fetchone()[0]
    assert zero == 0
    error = next(line for line in out.output.splitlines() if "requests_meet_power" in line)
    assert error.startswith("check ERROR: request_energy.requests_meet_power: endpoint qwen3-8b: power is 7 h 00 min earlier "
                            "than the requests: was the log written in local time? re-import with --tz -07:00"), error
    assert "request_energy.power_coverage: requests without full power coverage: qwen3-8b: 4 of 4 request(s) without power" in out.output


@pytest.mark.parametrize("run", ["run-1784415083", "run-1784415161"])
def test_smoke_offset_estimate_is_within_one_sample_interval(run):
    """The estimator alone on the same real run: |estimate − 7 h| ≤ the 250 ms sample interval."""
    from pipeline.phases.coverage import estimate_offset
    lines = (SMOKE / run / "power.csv").read_text().splitlines()[1:]
    t = np.array([np.datetime64(line.split(",")[0].replace("/", "-").replace(" ", "T"), "ns").astype(np.int64) for line in lines])
    w = np.array([float(line.split(",")[3]) for line in lines])
    r = json.loads((SMOKE / run / "requests.json").read_text())
    a = np.array([round(x * 1e9) for x in r["request_timestamps"]], np.int64)
    ft = a + np.array([round(x * 1e9) for x in r["ttfts"]], np.int64)
    b = ft + np.array([round(i * (n - 1) * 1e9) for i, n in zip(r["itls"], r["output_lens"], strict=True)], np.int64)
    est = estimate_offset(a, ft, b, t, w)
    assert abs(est["offset_s"] - TRUE_OFFSET_S) <= est["sample_interval_s"] == 0.25, est
    assert est["correlation"] > 0.8


@pytest.mark.slow  # runs the daily job (the phase tables) on a day of its own
def test_smoke_with_tz_keeps_the_numbers(tmp_path):
    """With --tz -07:00 every request has power: the energies main computed, no ERROR."""
    run = "run-1784415083"
    _, out, con = _smoke_day(tmp_path, run, "--tz", "-07:00")
    assert out.exit_code == 0, out.output
    assert "requests_meet_power" not in out.output
    got = con.execute("SELECT total_j, power_coverage FROM request_energy ORDER BY arrival_ts").fetchall()
    assert [g[0] for g in got] == pytest.approx(MAIN_TOTAL_J[run], rel=1e-12)
    # the first request arrived 46 ms before nvidia-smi's first sample: partly covered, and said so
    assert 0.9 < got[0][1] < 1
    assert [g[1] for g in got[1:]] == [1.0, 1.0, 1.0]
    assert "qwen3-8b: 0 of 4 request(s) without power (energies null), 1 partly covered" in out.output


def _write_power(d, t_ns: np.ndarray, power: np.ndarray, prefix: str = "p") -> None:
    for gpu in range(2):
        write_dataset(power_table("infer-0", gpu, t_ns, power), d, "power", prefix=f"{prefix}-{gpu}")


def _known_power() -> tuple[np.ndarray, np.ndarray]:
    """tests/phase_fixtures' endpoint: 10 Hz mid-slot samples following the request labels, 60 s."""
    n_pre, n_dec = slot_labels()
    power = np.where(n_pre > 0, P_PRE, np.where(n_dec > 1, P_DEC2, np.where(n_dec > 0, P_DEC, P_IDLE)))
    t = T0 + np.arange(len(power), dtype=np.int64) * 100_000_000 + 50_000_000
    return t, power


def _request_energy(d, date: str = DAY.isoformat()):
    outcome = run_day(d, date, selection=PHASE_ASSETS.split(","))
    assert outcome.success, outcome.error
    con = duckdb.connect()
    con.register("request_energy", read_day(d, "request_energy", date))
    rows = con.execute("SELECT request_id, prefill_j, decode_j, total_j, power_coverage FROM request_energy ORDER BY request_id").fetchall()
    return {r[0]: r[1:] for r in rows}, {c.check: c for c in outcome.failed_checks}


@pytest.fixture(scope="module")
@builds_a_day
def full(tmp_path_factory):
    d = tmp_path_factory.mktemp("full") / "data"
    endpoint_inventory(d)
    _write_power(d, *_known_power())
    write_dataset(requests_table(REQUESTS_S), d, "requests", prefix="req")
    return _request_energy(d)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_power_for_part_of_the_requests_known_answer(tmp_path, full):
    """Power (2 GPUs) only from 0 to 16 s and 20.75 to 25 s: A and B (10–14.5 s) keep exactly the
    energies of the fully measured day, C (20.05–21.35 s) is covered 0.6 / 1.3 of its time, D and E
    (30–31.5 s) have no sample at all: NULL energies, not 0, and a WARN naming them."""
    full_rows, full_failed = full
    assert all(v[3] == 1.0 and v[2] > 0 for v in full_rows.values()), full_rows
    d = tmp_path / "data"
    endpoint_inventory(d)
    t, p = _known_power()
    s = (t - T0) / 1e9
    keep = (s < 16) | ((s > 20.7) & (s < 25))
    _write_power(d, t[keep], p[keep])
    write_dataset(requests_table(REQUESTS_S), d, "requests", prefix="req")
    rows, failed = _request_energy(d)
    for rid in ("A", "B"):
        assert rows[rid] == full_rows[rid], rid  # the same doubles
    assert rows["C"][3] == pytest.approx((21.35 - 20.75) / (21.35 - 20.05), abs=1e-9)
    assert 0 < rows["C"][2] < full_rows["C"][2]
    assert rows["D"] == rows["E"] == (None, None, None, 0.0)
    warn = failed["power_coverage"].description
    assert "ep-a: 2 of 5 request(s) without power (energies null), 1 partly covered" in warn, warn
    assert "requests_meet_power" not in failed and "power_coverage" not in full_failed


@pytest.mark.slow  # runs the daily job on a day of its own
def test_offset_found_in_the_previous_days_power(tmp_path):
    """Power on day D (22:00) and the requests 5 h later, after midnight on D + 1: running D + 1,
    which has no power of its own, reads the adjacent day's files for the estimate."""
    d = tmp_path / "data"
    endpoint_inventory(d)
    t, p = _known_power()
    _write_power(d, t + 22 * 3600 * 10**9, p)
    write_dataset(requests_table(REQUESTS_S, offset_s=27 * 3600), d, "requests", prefix="req")
    next_day = (DAY + dt.timedelta(days=1)).isoformat()
    outcome = run_day(d, next_day, selection=["power_1s", "energy_curve", "phase_intervals", "request_energy"])
    failed = {c.check: c for c in outcome.failed_checks}
    assert failed["requests_meet_power"].description.startswith(
        "endpoint ep-a: power is 5 h 00 min earlier than the requests: was the log written in local time? re-import with --tz -05:00")
    con = duckdb.connect()
    con.register("request_energy", read_day(d, "request_energy", next_day))
    assert con.execute("SELECT count(*), count(total_j) FROM request_energy").fetchone() == (5, 0)


def test_offset_described_with_its_sign():
    from pipeline.phases.coverage import describe_offset

    assert describe_offset(25199.875) == "power is 7 h 00 min earlier than the requests: was the log written in local time? re-import with --tz -07:00"
    assert describe_offset(-19800.0) == "power is 5 h 30 min later than the requests: was the log written in local time? re-import with --tz +05:30"
    assert describe_offset(3 * 3600 + 700) == "power is 3 h 12 min earlier than the requests"  # not a zone: no --tz advice
    assert describe_offset(-12.5) == "power is 12.5 s later than the requests"
