"""The series engine (pipeline/series/): one read of a host-day's samples for every per-GPU
table, bounded chunks, parts whose columns are the declared schema, the source ranking in one
place, a Dagster run that computes the three tables in one pass, and the curves that pass leaves
for the run's later readers (pipeline/series/cache.py)."""

import contextlib
import dataclasses
import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import AssetExecutionContext

from collectors.parquet_sink import write_dataset
from pipeline import kernels
from pipeline.phases import curve
from pipeline.runner import run_day
from pipeline.series import SERIES_TABLES, SampleSource, ddl_columns, empty_relation_sql, engine
from pipeline.series import cache as curve_cache
from pipeline.warehouse import compute_connection
from tests.builders import DAY, day_start_ns, power_table, two_host_inventory

DATE = DAY.isoformat()
T0 = day_start_ns()
S = 1_000_000_000


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """train-0: its two GPUs interleaved row by row in one unsorted file (nvml-field 10 Hz), GPU 1
    also from DCGM (another source, ranked below) for a minute; train-1: nvml-buffer 50 Hz."""
    rng = np.random.default_rng(4)
    d = tmp_path_factory.mktemp("series") / "data"
    two_host_inventory(d)
    t = T0 + np.arange(0, 180 * 10) * 100_000_000
    rows = pa.concat_tables([power_table("train-0", g, t, 200 + 300 * rng.random(len(t))) for g in (0, 1)])
    order = np.argsort(np.r_[np.arange(len(t)), np.arange(len(t))], kind="stable")  # GPU 0, 1, 0, 1, ...
    rows = rows.take(order)
    write_dataset(rows, d, "power", prefix="a")
    td = T0 + 200 * S + np.arange(600) * 100_000_000
    write_dataset(power_table("train-0", 1, td, 300 + 10 * rng.random(len(td)), source="dcgm"), d, "power", prefix="b")
    tb = T0 + 5 * S + np.arange(120 * 50) * 20_000_000
    write_dataset(power_table("train-1", 0, tb, 400 + 100 * rng.random(len(tb)), source="nvml-buffer"), d, "power", prefix="c")
    return d


def _parts(con, tmp_path, tables=SERIES_TABLES, spill_dir=None, cache=None) -> dict[str, pa.Table]:
    paths = {t.name: tmp_path / f"{t.name}.parquet" for t in tables}
    engine.write_parts(con, tables, paths, DATE, spill_dir, cache)
    return {name: pq.read_table(path) for name, path in paths.items()}


@pytest.mark.parametrize("source", ["nvml-buffer", "nvml-field", "simulated", "nvidia-smi", "dcgm", "prometheus"])
@pytest.mark.parametrize("is_average", [False, True])
def test_source_ranking_is_the_views_ranking(tmp_path, source, is_average):
    """The SQL views (power_day) rank sources with the macro source_rank: the same ranks."""
    with compute_connection(tmp_path, DATE) as con:
        sql = con.execute("SELECT source_rank(?, ?)", [source, is_average]).fetchone()[0]
    assert SampleSource.of(source, is_average).rank == sql


def test_part_columns_are_the_declared_schema(day, tmp_path):
    """DuckDB reads each part with the declared DDL's columns and types; pyarrow reads host and
    source as plain strings (as DuckDB's COPY wrote them)."""
    with compute_connection(day, DATE) as con:
        parts = _parts(con, tmp_path)
        for t in SERIES_TABLES:
            read = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{tmp_path / t.name}.parquet')").fetchall()
            declared = con.execute(f"DESCRIBE {empty_relation_sql(t)}").fetchall()
            assert [r[:2] for r in read] == [r[:2] for r in declared]
            assert [r[0] for r in read] == [c.split()[0] for c in ddl_columns(t).split(", ")]
            assert parts[t.name].schema.field("host").type == pa.string()
            assert parts[t.name].num_rows > 0


@pytest.mark.parametrize("spill", [False, True], ids=["held", "spilled"])
def test_bounded_chunks_give_the_same_rows(day, tmp_path, monkeypatch, spill):
    """Read in chunks far smaller than a host's samples (GPUs interleaved row by row inside each
    chunk), held in memory or each GPU's spilled to its own file, every table's rows are the same
    as from one chunk per host; the spill files are gone after."""
    for folder in ("whole", "chunked", "spill"):
        (tmp_path / folder).mkdir()
    with compute_connection(day, DATE) as con:
        whole = _parts(con, tmp_path / "whole")
        monkeypatch.setattr(engine, "BATCH_ROWS", 997)
        chunked = _parts(con, tmp_path / "chunked", spill_dir=tmp_path / "spill" if spill else None)
    assert not list((tmp_path / "spill").iterdir())
    for name, rows in whole.items():
        assert rows.equals(chunked[name]), name
    gpus = whole["power_1s"].select(["host", "gpu"]).to_pylist()
    assert {(r["host"], r["gpu"]) for r in gpus} == {("train-0", 0), ("train-0", 1), ("train-1", 0)}


def test_one_read_of_each_host_for_every_table(day, tmp_path, monkeypatch):
    """The three tables come from one read of each host's samples, not one read per table."""
    reads = []
    real = engine._read_by_gpu

    def counted(con, sql, params, spill_dir=None):
        reads.append(params["host"])
        return real(con, sql, params, spill_dir)

    monkeypatch.setattr(engine, "_read_by_gpu", counted)
    with compute_connection(day, DATE) as con:
        _parts(con, tmp_path)
    assert sorted(reads) == ["train-0", "train-1"]


def test_one_time_sort_and_source_choice_per_gpu_for_every_table(day, tmp_path, monkeypatch):
    """The three tables share one GPU's best-source rows in time order (kernels.best_rows_of): each
    GPU's samples are sorted once in the pass, not once per table; the rows are those of each
    kernel on its own."""
    sorts = []
    real = kernels._sorted_by_time

    def counted(t_ns):
        sorts.append(len(t_ns))
        return real(t_ns)

    monkeypatch.setattr(kernels, "_sorted_by_time", counted)
    with compute_connection(day, DATE) as con:
        _parts(con, tmp_path)
        samples = list(engine.day_samples(con))
    assert len(sorts) == len(samples) == 3  # train-0's GPUs 0 and 1 (unsorted, DCGM for a minute), train-1's GPU 0
    for s in samples:
        alone = kernels.grid_100ms(s.t_ns, s.power_w, s.power_avg_w, s.has_avg, s.source_rank, s.is_average)
        shared = kernels.grid_100ms(s.t_ns, s.power_w, s.power_avg_w, s.has_avg, s.source_rank, s.is_average, s.best)
        for k in alone:
            np.testing.assert_array_equal(alone[k], shared[k], err_msg=k)
        alone = kernels.seconds_1s(s.t_ns, s.power_w, s.source_rank, s.is_average)
        shared = kernels.seconds_1s(s.t_ns, s.power_w, s.source_rank, s.is_average, s.best)
        for k in alone:
            np.testing.assert_array_equal(alone[k], shared[k], err_msg=k)
        alone = kernels.energy_curve(s.t_ns, s.power_w, s.source_rank)
        for k in alone:
            np.testing.assert_array_equal(alone[k], s.curve[k], err_msg=k)


def _pass_ids(d) -> dict[str, set[bytes]]:
    return {t.name: {pq.ParquetFile(p).metadata.metadata[engine.PASS_KEY.encode()]
                     for p in (d / "derived" / t.name).rglob("part-0.parquet")} for t in SERIES_TABLES}


@pytest.mark.slow  # two runs of the daily job (24 s on a busy 2-core machine)
def test_a_run_computes_its_series_tables_in_one_pass(day):
    """A run of the three assets writes them from one pass (one pass id per cluster-day, shared by
    the three parts), and leaves no staged part; a later run of energy_curve alone computes only
    it (power_1s and power_100ms keep their parts)."""
    outcome = run_day(day, DATE, selection=[t.name for t in SERIES_TABLES])
    assert outcome.success, outcome.error
    first = _pass_ids(day)
    assert all(len(ids) == 2 for ids in first.values()), first  # two cluster-days: c0 and the unassigned hosts
    assert first["power_1s"] == first["power_100ms"] == first["energy_curve"], first
    assert not list((day / "derived").rglob(".tmp-*"))
    assert run_day(day, DATE, selection=["energy_curve"]).success
    later = _pass_ids(day)
    assert later["power_1s"] == later["power_100ms"] == first["power_1s"]
    assert not later["energy_curve"] & first["energy_curve"]
    assert not list((day / "derived").rglob(".tmp-*"))


def test_cached_curves_are_the_curves_of_the_samples(day, tmp_path):
    """The curves a pass leaves in its run's cache are, array for array, the curves (and 1 s-average
    traces) built from the samples; a cache is read only once sealed, and not after it is dropped."""
    (tmp_path / "tmp").mkdir()
    with compute_connection(day, DATE) as con:
        cache = curve_cache.begin("test-run", tmp_path / "tmp")
        assert curve_cache.of_run("test-run") is None  # not sealed yet
        _parts(con, tmp_path, cache=cache)
        sealed = curve_cache.of_run("test-run")
        assert sealed is not None
        seen = []
        for s in engine.day_samples(con):
            ref = curve.curve_of(s)
            avg_t, avg_w, _ = kernels.best_samples(s.t_ns[s.has_avg], s.power_avg_w[s.has_avg], s.source_rank[s.has_avg])
            got = curve._cached(sealed, s.host, s.gpu, with_avg=True)
            assert got is not None and len(got) == len(ref) > 0
            for name in ("t_ns", "power_w", "energy_j", "next_t_ns", "next_w", "has_next", "mine", "source_id", "is_average"):
                np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
                assert getattr(got, name).dtype == getattr(ref, name).dtype, name
            assert got.source_names == ref.source_names
            np.testing.assert_array_equal(got.avg_t_ns, avg_t)
            np.testing.assert_array_equal(got.avg_w, avg_w)
            seen.append((s.host, s.gpu))
        assert seen == [("train-0", 0), ("train-0", 1), ("train-1", 0)]
        assert curve._cached(sealed, "train-1", 1) is None and curve._cached(sealed, "nobody", 0) is None
    curve_cache.drop("test-run")
    assert curve_cache.of_run("test-run") is None
    assert not list((tmp_path / "tmp").iterdir())


@pytest.fixture
def raw_reads(monkeypatch) -> list[tuple[str, str]]:
    """(step, host) of every raw-sample read a run makes (engine._read_by_gpu), as it happens."""
    reads: list[tuple[str, str]] = []
    real = engine._read_by_gpu

    def counted(con, sql, params, spill_dir=None):
        reads.append((AssetExecutionContext.get().asset_key.path[-1], params["host"]))
        return real(con, sql, params, spill_dir)

    monkeypatch.setattr(engine, "_read_by_gpu", counted)
    return reads


@pytest.mark.slow  # two runs of a small day: ~15 s on an idle box
def test_later_readers_of_a_run_take_the_pass_curves(day, raw_reads):
    """swing_stats in a run with the series tables reads no raw sample: each GPU's curve comes from
    the run's engine pass (pipeline/series/cache.py), and its rows are the ones it computes from the
    raw samples when it runs alone (no pass, no cache: it reads the host's files)."""
    selection = [t.name for t in SERIES_TABLES] + ["fleet_power_1s", "fleet_power_100ms", "swing_stats"]
    outcome = run_day(day, DATE, selection=selection, workers=1, fleet_day=False)
    assert outcome.success, outcome.error
    assert {step for step, _ in raw_reads} == {"power_1s"}, raw_reads  # the pass, in the first series step
    # each cluster-day's run removes its cache when it ends: nothing of the run stays on disk
    assert not list((day / ".duckdb_tmp").glob(f"{curve_cache.PREFIX}*"))
    swings = _swing_rows(day)
    raw_reads.clear()
    outcome = run_day(day, DATE, selection=["swing_stats"], workers=1, fleet_day=False)
    assert outcome.success, outcome.error
    assert ("swing_stats", "train-0") in raw_reads, raw_reads
    assert _swing_rows(day) == swings


@pytest.mark.slow  # a run of a small day at another grid step
def test_the_grid_stream_of_a_run_takes_the_pass_curves(day, raw_reads):
    """fleet_power_grid at a 500 ms grid streams its rows into its part, read by DuckDB from a
    thread of its own: the stream still runs in the step's context, so in a run with the series
    tables it finds the pass's curves and reads no raw sample (outside that context it found no run,
    read the host's files again, and the run's step could not say which asset it was)."""
    from collectors.settings import Settings
    from pipeline.warehouse import read_day

    selection = [t.name for t in SERIES_TABLES] + ["fleet_power_1s", "fleet_power_100ms", "fleet_power_grid"]
    outcome = run_day(day, DATE, selection=selection, workers=1, fleet_day=False, settings=Settings(data_dir=str(day), grid_step_ms=500))
    assert outcome.success, outcome.error
    assert {step for step, _ in raw_reads} == {"power_1s"}, raw_reads
    grid = read_day(day, "fleet_power_grid", DATE)
    assert grid.num_rows > 0 and set(grid.column("grid_step_ms").to_pylist()) == {500}


def _swing_rows(d) -> list:
    with compute_connection(d, DATE) as con:
        return con.execute(f"SELECT * FROM read_parquet('{d}/derived/swing_stats/**/*.parquet') WHERE level = 'gpu' ORDER BY ALL").fetchall()


def test_stale_caches_of_killed_runs_are_removed(tmp_path):
    """A cache folder left by a killed run goes after an hour untouched; a fresh one, or one this
    process holds (however old), stays; opening a cache touches it."""
    old = tmp_path / f"{curve_cache.PREFIX}dead-run-x"
    fresh = tmp_path / f"{curve_cache.PREFIX}live-run-y"
    for folder in (old, fresh):
        folder.mkdir()
    mine = curve_cache.begin("this-run", tmp_path)
    mine.seal()
    hours_ago = time.time() - 2 * 3600
    for folder in (old, mine.folder):
        os.utime(folder, (hours_ago, hours_ago))
    assert curve_cache.remove_stale(tmp_path) == [old]
    assert fresh.exists() and mine.folder.exists()
    assert curve_cache.of_run("this-run") is not None
    assert mine.folder.stat().st_mtime > hours_ago + 3600
    curve_cache.drop("this-run")
    assert not mine.folder.exists()


@pytest.mark.slow  # a whole run of a small day
def test_a_whole_run_reads_each_host_once(day, raw_reads):
    """A run of every asset (no selection: Dagster hands the steps an empty asset selection) reads
    each host's raw samples once, in its first series step, for the three series tables and every
    curve reader after them; it used to compute each series table in a pass of its own."""
    outcome = run_day(day, DATE, workers=1)
    assert outcome.success, outcome.error
    assert sorted(host for _, host in raw_reads) == ["train-0", "train-1"], raw_reads
    assert {step for step, _ in raw_reads} <= {t.name for t in SERIES_TABLES}, raw_reads


def _faults_of_touching(libc, size: int) -> int:
    """Minor page faults of a fresh ``malloc(size)`` written through (then freed)."""
    import ctypes
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_pass_reuses_freed_arrays_and_gives_them_back_after(day, tmp_path, monkeypatch):
    """Inside the pass a freed block of a GPU-day's size (64 MiB) is reused, not mapped and faulted
    in again page by page; after it, blocks of 1 MiB and more are mapped apart again (the
    process's setting, process_memory.return_freed_memory). The whole pass runs inside."""
    import ctypes

    from pipeline import process_memory

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    size = 64 << 20
    process_memory.return_freed_memory()
    assert _faults_of_touching(libc, size) > 8000  # a fresh mapping: one fault a 4 KiB page
    with process_memory.reused_heap():
        _faults_of_touching(libc, size)
        assert _faults_of_touching(libc, size) < 1000  # the freed block again
    assert _faults_of_touching(libc, size) > 8000

    inside = []
    real, rows = process_memory.reused_heap, SERIES_TABLES[0].rows

    @contextlib.contextmanager
    def watched():
        with real():
            inside.append(True)
            yield
            inside.append(False)

    def table_rows(s):
        inside.append(inside[-1] if inside else False)
        return rows(s)

    monkeypatch.setattr(process_memory, "reused_heap", watched)
    with compute_connection(day, DATE) as con:
        _parts(con, tmp_path, tables=[dataclasses.replace(SERIES_TABLES[0], rows=table_rows)])
    assert inside[0] is True and inside[-1] is False and all(inside[1:-1]) and len(inside) == 5  # 3 GPUs' rows inside
