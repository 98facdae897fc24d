"""The series engine (pipeline/series/): one read of a host-day's samples for every per-GPU
table, bounded chunks, parts whose columns are the declared schema, the source ranking in one
place, and a Dagster run that computes the three tables in one pass."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.parquet_sink import write_dataset
from pipeline.runner import run_day
from pipeline.series import SERIES_TABLES, SampleSource, ddl_columns, empty_relation_sql, engine
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


def _parts(con, tmp_path, tables=SERIES_TABLES, spill_dir=None) -> dict[str, pa.Table]:
    paths = {t.name: tmp_path / f"{t.name}.parquet" for t in tables}
    engine.write_parts(con, tables, paths, DATE, spill_dir)
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
