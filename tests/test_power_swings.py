"""swing_stats and fleet_power_100ms on constructed square waves whose swings are known exactly."""

import duckdb
import numpy as np
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.warehouse import compute_connection, read_day
from tests.builders import DAY, power_table, square_wave, two_host_inventory
from tests.days import builds_a_day
from tests.oracles import oracle_query

DATE = DAY.isoformat()
ASSETS = ["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms", "swing_stats"]


def _con(data_dir, *tables):
    con = duckdb.connect()
    for t in tables:
        con.register(t, read_day(data_dir, t, DATE))
    return con


@pytest.fixture(scope="module")
@builds_a_day
def swings(tmp_path_factory):
    """train-0: two GPUs, 100↔700 W square wave, period 4 s, edges on whole seconds (aligned 1 s and
    2 s windows never see an edge; sliding ones do). infer-0/0: the same wave shifted by 0.35 s,
    with one missing slot (carried) and one 0.3 s hole (windows over it excluded). infer-0/1: 200 W."""
    data_dir = tmp_path_factory.mktemp("swings") / "data"
    two_host_inventory(data_dir)
    for gpu in range(2):
        write_dataset(power_table("train-0", gpu, *square_wave(120, 4.0, 100.0, 700.0)), data_dir, "power", prefix=f"t{gpu}")
    t, p = square_wave(120, 4.0, 100.0, 700.0)
    p = np.roll(p, 3)  # edges 0.3 s after the whole second
    keep = np.ones(len(t), bool)
    keep[[505]] = False  # one empty slot at 50.5 s: carried
    keep[[800, 801, 802]] = False  # 80.0–80.3 s: a real hole
    write_dataset(power_table("infer-0", 0, t[keep], p[keep]), data_dir, "power", prefix="i0")
    write_dataset(power_table("infer-0", 1, *square_wave(120, 4.0, 200.0, 200.0)), data_dir, "power", prefix="i1")
    outcome = run_day(data_dir, DATE, selection=ASSETS)
    assert outcome.success, outcome.error
    return data_dir, outcome


def _row(con, level, entity, window_s, series="instant"):
    return con.execute(
        "select max_swing_w, max_swing_pct, p50_swing_w, p99_swing_w, max_ramp_w_per_s, windows_over_10pct, "
        "windows_over_25pct, provisioned_w, windows_complete, windows_incomplete "
        "from swing_stats where level=? and entity=? and window_s=? and series=?",
        [level, entity, window_s, series],
    ).fetchone()


def test_gpu_square_wave_exact(swings):
    con = _con(swings[0], "swing_stats")
    for w in (1, 2, 10, 60):
        mx, pct, p50, p99, ramp, over10, over25, prov, n, bad = _row(con, "gpu", "train-0/0", w)
        assert mx == 600.0 and pct == pytest.approx(600 / 700 * 100, rel=1e-6), w
        assert ramp == pytest.approx(6000.0)
        assert prov == 700.0 and n == 120 // w and bad == 0
        # Aligned windows: 1 s and 2 s ones never hold an edge, 10 s and 60 s always do.
        assert (p50, p99, over10, over25) == ((0.0, 0.0, 0, 0) if w <= 2 else (600.0, 600.0, 120 // w, 120 // w)), w


def test_sums_and_levels(swings):
    con = _con(swings[0], "swing_stats")
    # Host: two GPUs in phase, 200↔1400 W against 1500 W provisioned.
    assert _row(con, "host", "train-0", 2)[:2] == (1200.0, pytest.approx(80.0))
    assert _row(con, "role", "training", 1)[0] == 1200.0
    # infer-0/1 is flat.
    assert _row(con, "gpu", "infer-0/1", 60)[0] == 0.0


def test_shifted_wave_ramp_inside_blocks(swings):
    con = _con(swings[0], "swing_stats")
    mx, _, p50, _, ramp, *_ = _row(con, "gpu", "infer-0/0", 1)
    # Edges 0.3 s into a second: every aligned 1 s window that holds one swings 600 W; the ramp is
    # found inside a block, not on a block edge.
    assert mx == 600.0 and ramp == pytest.approx(6000.0)


def test_gaps_carried_or_excluded(swings):
    con = _con(swings[0], "swing_stats", "fleet_power_100ms")
    *_, n, bad = _row(con, "gpu", "infer-0/0", 1)
    # The single empty slot is carried; the 0.3 s hole makes aligned second 80 incomplete.
    assert (n, bad) == (119, 1)
    # The host sum is incomplete exactly over the hole (3 slots; the first is not carried either).
    # slot 800 is empty but 799 exists: carried; 801, 802 stay empty.
    assert con.execute("select count(*) from fleet_power_100ms where entity='infer-0' and not complete").fetchone()[0] == 2
    assert _row(con, "host", "infer-0", 1)[8:] == (119, 1)


ROW_COLUMNS = """level, entity, window_s, series, p50_swing_w, p99_swing_w, max_ramp_w_per_s, windows_over_10pct,
    windows_over_25pct, provisioned_w, windows_complete, windows_incomplete, grid_step_ms, max_swing_w, max_swing_pct"""


def kernel_and_sql_rows(data_dir, date: str) -> tuple[list, list]:
    """The stored rows (the table's one implementation, the kernels of pipeline/assets/swing_stats.py)
    and the rows the SQL oracle tests/oracles/swing_stats.sql computes over the same day (as the
    DuckDB CLI would run it), sorted; the last two columns are the max swing (a GPU's: on its raw
    samples, stored; on the grid, the oracle)."""
    with compute_connection(data_dir, date) as con:
        kernel = con.execute(f"SELECT {ROW_COLUMNS} FROM swing_stats WHERE level <> 'cluster_role' ORDER BY ALL").fetchall()
        con.execute("SET VARIABLE grid_step_ms = 100")  # as the file's header tells the CLI
        query = oracle_query(con, "swing_stats")
        sql = con.execute(f"SELECT {ROW_COLUMNS} FROM ({query}) WHERE level <> 'cluster_role' ORDER BY ALL").fetchall()
    return kernel, sql


def assert_kernels_match_sql(data_dir, date: str) -> list:
    """Every column equal; for GPUs all but the max swing, taken on the raw samples (against a brute
    force in tests/test_power_swings_native.py), not on the grid: a 1 s average sampled every second
    swings 0 W within 1 s on its samples, while the grid carries each value into the next second."""
    kernel, sql = kernel_and_sql_rows(data_dir, date)
    assert [r[:4] for r in kernel] == [r[:4] for r in sql]
    for k, s in zip(kernel, sql, strict=True):
        if k[0] == "gpu":
            assert k[:-2] == s[:-2], (k, s)
        else:
            assert k == s, (k, s)
    return kernel


def test_kernel_rows_match_the_sql_oracle(swings):
    rows = assert_kernels_match_sql(swings[0], DATE)
    assert {r[0] for r in rows} == {"gpu", "host", "cluster", "role", "fleet"}
    assert any(r[11] for r in rows if r[0] == "gpu") and any(r[11] for r in rows if r[0] == "host"), "a hole makes windows incomplete"


def test_checks_pass(swings):
    failed = {(c.asset, c.check) for c in swings[1].failed_checks}
    assert not {f for f in failed if f[0] in ("swing_stats", "fleet_power_100ms") and f[1] != "windows_complete"}, failed


class _SlotReads:
    """A connection that records how many rows each numpy fetch of power_100ms returned (DuckDB's
    connection takes no new attributes, so calls go through this wrapper)."""

    def __init__(self, con) -> None:
        self._con = con
        self.rows: list[int] = []

    def __getattr__(self, name):
        return getattr(self._con, name)

    def sql(self, query, **kwargs):
        rel = self._con.sql(query, **kwargs)
        if "power_100ms" not in query:
            return rel
        reads = self

        class _Fetch:
            def fetchnumpy(self):
                out = rel.fetchnumpy()
                reads.rows.append(len(next(iter(out.values()))))
                return out

        return _Fetch()


def test_gpu_rows_hold_one_gpus_slots_at_a_time(swings):
    """swing_stats' GPU rows read each GPU's 100 ms slots on their own, not its host's (at 8 GPUs
    x 24 h the host's slots were ~0.2 GB held beside each GPU's curve), with the same rows."""
    from pipeline.assets.swing_stats import gpu_swings

    with compute_connection(swings[0], DATE) as con:
        per_gpu = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM power_100ms GROUP BY host, gpu)").fetchone()[0]
        reads = _SlotReads(con)
        rows = gpu_swings(reads)
        stored = con.execute("SELECT count(*) FROM swing_stats WHERE level = 'gpu'").fetchone()[0]
    assert reads.rows and max(reads.rows) <= per_gpu, (reads.rows, per_gpu)
    assert len(rows) == stored
