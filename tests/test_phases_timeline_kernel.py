"""phase_timeline's rows (pipeline/assets/inference_phases.py, timeline_rows: numpy per endpoint GPU)
are exactly those of its SQL oracle (tests/oracles/phase_timeline.sql, plain SQL as the DuckDB CLI
runs it), on a messy endpoint day."""

import numpy as np
import pyarrow as pa
import pytest

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection
from tests.builders import DAY, power_table
from tests.days import builds_a_day
from tests.oracles import oracle_query
from tests.phase_fixtures import P_DEC, P_IDLE, P_PRE, REQUESTS_S, T0, requests_table, slot_labels

DATE = DAY.isoformat()
S = 1_000_000_000
REQUESTS = REQUESTS_S | {
    "F": (40.0, 40.0, 40.3, 45.0, 1000, 200),  # overlapping prefills and decodes
    "G": (40.1, 40.1, 40.25, 42.0, 50, 30),
    "H": (40.15, None, 40.6, 41.0, 20, 5),
}


def _inventory(d) -> None:
    """ep-a on GPUs 0-2 (logged), ep-b on GPU 3 (no request log: phase NULL)."""
    inv = {"fleets": [{"name": "t", "clusters": [{"name": "c0", "hosts": [{
        "name": "infer-0", "role": "inference",
        "gpus": [{"index": i, "tdp_w": 700.0, "model": "H200"} for i in range(4)],
        "endpoints": [{"name": "ep-a", "gpus": [0, 1, 2]}, {"name": "ep-b", "gpus": [3]}],
    }]}]}]}
    d.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory(inv), d / "inventory.yaml")


def _levels(t_ns: np.ndarray, rng) -> np.ndarray:
    n_pre, n_dec = slot_labels({k: v for k, v in REQUESTS.items() if v[1] is not None or k == "E"}, 60)  # power levels only
    slot = np.clip((t_ns - T0) // 100_000_000, 0, len(n_pre) - 1)
    return np.where(n_pre[slot] > 0, P_PRE, np.where(n_dec[slot] > 0, P_DEC, P_IDLE)) + 20 * rng.random(len(t_ns))


def _messy_day(d) -> None:
    rng = np.random.default_rng(15)
    _inventory(d)
    # GPU 0: nvml-buffer ~50 Hz, jittered µs times, a 0.45 s gap (interpolated) and a 3 s gap (not)
    t = T0 + np.sort(rng.integers(0, 60 * S, 3000) // 1000 * 1000)
    t = t[((t < T0 + 25 * S) | (t > T0 + 25 * S + 450_000_000)) & ((t < T0 + 50 * S) | (t > T0 + 53 * S))]
    write_dataset(power_table("infer-0", 0, t, _levels(t, rng), source="nvml-buffer"), d, "power", prefix="a")
    # GPU 1: no power at all. GPU 2: a 1 s average only (power_avg_w, no power_w)
    t = T0 + np.arange(60, dtype=np.int64) * S
    table = power_table("infer-0", 2, t, _levels(t, rng), source="dcgm")
    avg = table.column("power_w")
    table = table.set_column(table.schema.get_field_index("power_w"), "power_w", pa.nulls(len(t), avg.type))
    table = table.set_column(table.schema.get_field_index("power_avg_w"), "power_avg_w", avg.cast(table.schema.field("power_avg_w").type))
    write_dataset(table, d, "power", prefix="avg")
    # GPU 3 (ep-b): nvml-field at 250 ms, then 10 Hz
    t = T0 + np.r_[np.arange(0, 30 * S, 250_000_000), np.arange(30 * S, 60 * S, 100_000_000)]
    write_dataset(power_table("infer-0", 3, t, _levels(t, rng), source="nvml-field"), d, "power", prefix="b")
    write_dataset(requests_table(REQUESTS), d, "requests")


@pytest.fixture(scope="module")
@builds_a_day  # a day through the job (~25 s)
def messy(tmp_path_factory):
    d = tmp_path_factory.mktemp("messy") / "data"
    _messy_day(d)
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "phase_intervals", "phase_segments", "phase_timeline"])
    assert outcome.success, outcome.error
    return d


def test_timeline_kernel_rows_match_sql_definition(messy):
    d = messy
    with compute_connection(d, DATE) as con:
        kernel = con.execute("SELECT * FROM phase_timeline").fetchall()
        grid = {(r[0], r[1], r[2]) for r in con.execute("SELECT host, gpu, ts FROM power_100ms WHERE power_w IS NOT NULL").fetchall()}
        query = oracle_query(con, "phase_timeline")
        sql = con.execute(f"{query}").fetchall()
    assert kernel == sql  # the same rows in the same order (endpoint, host, gpu, ts)
    assert len(kernel) > 1000
    gpus = {r[3]: [x for x in kernel if x[3] == r[3]] for r in kernel}
    assert set(gpus) == {0, 2, 3}, "GPU 1 has no power: no rows"
    assert any((r[2], r[3], r[4]) not in grid for r in gpus[0]), "a short gap of GPU 0 interpolated"
    assert any((r[2], r[3], r[4]) not in grid for r in gpus[2]), "the 1 s average interpolated"
    assert all(r[9] is None for r in gpus[3]) and all(r[9] is not None for r in gpus[0]), "ep-b has no request log"
    assert all(r[13] is None for r in gpus[2]), "a 1 s average cannot resolve prefills"
    assert {r[13] for r in gpus[0]} >= {"prefill", "decode", "idle"}
    assert max(r[7] for r in gpus[0]) >= 2 and any(r[10] for r in gpus[0]), "overlapping prefills, a fallback prefill start"


@pytest.mark.parametrize("table", ["phase_segments", "phase_intervals"])
def test_phase_rows_stream_endpoint_by_endpoint(messy, table, monkeypatch):
    """The phase tables' rows stream into the part endpoint by endpoint: ep-a's rows (GPUs 0-2) come
    before ep-b's GPU curve is built, so a step holds one endpoint's runs, not the cluster-day's.
    The stream's rows are the stored part's, in its order."""
    from pipeline.assets import inference_phases
    from pipeline.kernels import in_file_order
    from pipeline.phases import curve
    from pipeline.scope import Scope
    from pipeline.tables import TableRun

    built: list[tuple[str, int]] = []
    curves = curve.curves

    def counted(con, wanted, cache=curve.RUN):
        for host, gpu, c in curves(con, wanted, cache=cache):
            built.append((host, gpu))
            yield host, gpu, c
            del c

    monkeypatch.setattr(curve, "curves", counted)
    rows = {"phase_segments": inference_phases.segment_rows, "phase_intervals": inference_phases.interval_rows}[table]
    with compute_connection(messy, DATE) as con:
        with in_file_order(con):
            stored = con.execute(f"SELECT * FROM {table}").fetchall()
        reader = rows(con, TableRun(scope=Scope(date=DATE), rollup=False, grid_step_ms=100))
        first = reader.read_next_batch()
        at_first = list(built)
        rest = reader.read_all()
        streamed = pa.Table.from_batches([first]).to_pylist() + rest.to_pylist()
    assert set(at_first) <= {("infer-0", 0), ("infer-0", 1), ("infer-0", 2)} and at_first, at_first
    assert {r["endpoint"] for r in pa.Table.from_batches([first]).to_pylist()} == {"ep-a"}
    assert [tuple(r.values()) for r in streamed] == stored


def test_phase_steps_take_the_run_curves(messy, tmp_path, monkeypatch):
    """In a run whose engine pass ran, phase_segments and phase_intervals read no raw sample: their
    streamed rows (computed in DuckDB's threads, outside the run's Dagster context) take each GPU's
    curve from the pass's cache, as the hooks they replaced did."""
    import shutil

    from dagster import AssetExecutionContext, DagsterInvariantViolationError

    from pipeline.series import engine

    d = tmp_path / "data"
    shutil.copytree(messy, d)
    reads: list[str] = []
    real = engine._read_by_gpu

    def counted(con, sql, params, spill_dir=None):
        try:
            reads.append(AssetExecutionContext.get().asset_key.path[-1])
        except DagsterInvariantViolationError:
            reads.append("outside the run's context")
        return real(con, sql, params, spill_dir)

    monkeypatch.setattr(engine, "_read_by_gpu", counted)
    outcome = run_day(d, DATE, selection=["power_1s", "energy_curve", "power_100ms", "phase_intervals", "phase_segments"],
                      workers=1, fleet_day=False)
    assert outcome.success, outcome.error
    assert set(reads) == {"power_1s"}, reads  # the pass, in the first series step
