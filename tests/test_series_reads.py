"""Every per-GPU consumer of raw samples reads a host's samples once (pipeline.series.engine.host_samples),
not once per GPU: a host's files hold all its GPUs' rows, so a read per GPU scans them once per GPU.
Counted as statements over the view power_day_samples on a real DuckDB of two hosts × three GPUs
(rows interleaved, as the collector writes them), with the curves unchanged."""

import datetime as dt
import mmap
import weakref
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from pipeline import grid
from pipeline.phases import curve
from pipeline.sqlfiles import split

DAY = dt.date(2026, 12, 3)
T0 = int(dt.datetime(2026, 12, 3, 1, tzinfo=dt.UTC).timestamp()) * 10**9
VIEWS = Path(__file__).resolve().parent.parent / "sql" / "views"
HOSTS, GPUS = ("h0", "h1"), (0, 1, 2)


class Counted:
    """A connection that counts the statements reading the raw samples (view power_day_samples)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.reads = con, 0

    def _seen(self, sql: str) -> None:
        self.reads += "power_day_samples" in sql

    def execute(self, sql, *args, **kwargs):
        self._seen(sql)
        return self.con.execute(sql, *args, **kwargs)

    def sql(self, sql, *args, **kwargs):
        self._seen(sql)
        return self.con.sql(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.con, name)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    """Two hosts of three GPUs, 2 min of nvml-buffer samples ~20 ms apart each, GPU 1 also with
    nvml-field rows (instantaneous and 1 s average) every 100 ms; rows of a host's GPUs
    interleaved in time, as one file of the collector holds them."""
    rng = np.random.default_rng(3)
    cols: dict[str, list] = {k: [] for k in ("ts", "host", "gpu", "source", "power_w", "power_avg_w")}
    for host in HOSTS:
        for gpu in GPUS:
            for source, step_us, has_avg in (("nvml-buffer", 20_000, False), ("nvml-field", 100_000, True)):
                if source == "nvml-field" and gpu != 1:
                    continue
                t = T0 + np.cumsum(rng.integers(step_us - 3000, step_us + 3000, 120_000_000 // step_us)) * 1000
                cols["ts"] += list(t // 1000)
                cols["host"] += [host] * len(t)
                cols["gpu"] += [gpu] * len(t)
                cols["source"] += [source] * len(t)
                cols["power_w"] += list(rng.uniform(80, 700, len(t)).astype(np.float32))
                cols["power_avg_w"] += list(rng.uniform(80, 700, len(t)).astype(np.float32)) if has_avg else [None] * len(t)
    order = np.argsort(np.asarray(cols["ts"]), kind="stable")  # interleaved GPUs, time order
    raw = pa.table({
        "date": pa.array([DAY] * len(order), pa.date32()),
        "ts": pa.array(np.asarray(cols["ts"])[order], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "host": pa.array(np.asarray(cols["host"])[order]),
        "gpu": pa.array(np.asarray(cols["gpu"], np.uint8)[order]),
        "source": pa.array(np.asarray(cols["source"])[order]),
        "power_w": pa.array(np.asarray(cols["power_w"], np.float32)[order]),
        "power_avg_w": pa.array([cols["power_avg_w"][i] for i in order], pa.float32()),
    })
    c = duckdb.connect(str(tmp_path_factory.mktemp("reads") / "db.duckdb"))
    c.execute("SET TimeZone = 'UTC'")
    c.execute("SET VARIABLE partition_date = ?", [DAY])
    c.register("_raw", raw)
    c.execute("CREATE TABLE power AS SELECT * FROM _raw")
    c.unregister("_raw")
    c.execute("CREATE TABLE energy_curve AS SELECT DISTINCT date, host, gpu FROM power")
    c.execute("CREATE TABLE inventory_gpus AS SELECT DISTINCT host, gpu, 'c0' AS cluster, 'training' AS role, 'f' AS fleet FROM power")
    for statement in split((VIEWS / "power_day.sql").read_text()):
        c.execute(statement)
    return c


def _per_gpu_curve(con, host: str, gpu: int) -> dict[str, np.ndarray]:
    """The reference: one GPU's curve from a read of that GPU alone."""
    from pipeline.series.engine import host_samples

    s = next(host_samples(con, host, [gpu]))
    assert s.gpu == gpu
    c = curve.curve_of(s)
    return {"t_ns": c.t_ns, "power_w": c.power_w, "energy_j": c.energy_j, "next_t_ns": c.next_t_ns, "is_average": c.is_average}


def test_curves_read_each_host_once(con):
    """curves() over every GPU: one statement over the raw samples per host, each GPU's curve as a
    read of that GPU alone gives it, an empty curve for a GPU without samples."""
    counted = Counted(con)
    wanted = [(h, g) for h in HOSTS for g in (*GPUS, 7)]
    got = list(curve.curves(counted, reversed(wanted)))
    assert counted.reads == len(HOSTS)
    assert [(h, g) for h, g, _ in got] == sorted(wanted)
    for host, gpu, c in got:
        if gpu == 7:
            assert len(c) == 0
            continue
        ref = _per_gpu_curve(con, host, gpu)
        assert len(c) > 5000
        for k, v in ref.items():
            np.testing.assert_array_equal(getattr(c, k), v)
    assert curve.sources(con, "h0", 1)[0][0] == "nvml-buffer"
    assert {name for name, _, _ in curve.sources(con, "h0", 1)} == {"nvml-buffer", "nvml-field"}


def test_grid_series_read_each_host_once(con):
    """The host-and-above grid series (swing_stats at a grid step other than 100 ms) read each
    host's samples once, not once per GPU."""
    counted = Counted(con)
    frames = list(grid.summed_series(counted, 500))
    assert counted.reads == len(HOSTS)
    hosts = [f for f in frames if f["level"][0] == "host"]
    assert len(hosts) == len(HOSTS) and all(f["power_w"].sum() > 0 for f in hosts)


def test_one_gpu_in_memory(con, tmp_path):
    """With a spill folder each GPU's rows wait in files of their own (one a column) while the host
    is read; the folder is empty again once the GPUs are handed out."""
    from pipeline.series.engine import host_samples

    seen = []
    for s in host_samples(con, "h1", spill_dir=tmp_path):
        seen.append((s.gpu, len(s)))
        assert not list(tmp_path.glob(f"gpu-{s.gpu}-*"))  # handed out: its files are gone
        assert all(len(list(tmp_path.glob(f"gpu-{g}-*.bin"))) == 6 for g in GPUS if g > s.gpu)
    assert [g for g, _ in seen] == list(GPUS) and all(n > 5000 for _, n in seen)
    assert not list(tmp_path.iterdir())


def test_spilled_gpu_comes_back_outside_arrows_allocator(con, tmp_path):
    """A spilled GPU's columns are mapped from its files straight into numpy arrays: no Arrow table
    of the GPU's rows in between (whose memory Arrow's allocator keeps a while after it is freed,
    while the GPU's kernels run)."""
    from pipeline.series.engine import host_samples

    held = pa.total_allocated_bytes()  # what the process's other users of Arrow hold (a pytest worker runs other tests)
    for s in host_samples(con, "h1", spill_dir=tmp_path):
        for a in (s.t_ns, s.power_w, s.power_avg_w, s.source_id):  # over the files' pages
            assert isinstance(a.base, memoryview) and isinstance(a.base.obj, mmap.mmap)
        assert pa.total_allocated_bytes() - held < len(s) * 8  # not even the GPU's times held by Arrow


def test_phase_sources_read_each_host_once(tmp_path):
    """phase_segments' per-GPU power sources (`power_gpus`) on a simulated collector-shaped
    quarter hour of the tiny fleet (one inference host of 4 GPUs): one read of the host's raw
    samples, not one (or two) per GPU, and a source for every endpoint GPU."""
    from collectors.simulate import simulate
    from pipeline.assets.inference_phases import power_gpus
    from pipeline.warehouse import compute_connection

    simulate(tmp_path, start=DAY, fleet="tiny", hours=0.25, seed=0, shape="collector")
    with compute_connection(tmp_path, DAY.isoformat()) as con:
        counted = Counted(con)
        found = power_gpus(counted)
        gpus = (found.height, found["host"].n_unique(), found["source"].count())
    assert gpus[0] >= 2 and gpus[2] == gpus[0]
    assert counted.reads == gpus[1]


def test_curves_hold_one_gpu_at_a_time(con, monkeypatch):
    """curves() builds a GPU's curve only once the previous GPU's is gone (for a caller that drops
    the curve it was handed): one GPU-day's curve in memory, not two, while a phase step walks the
    GPUs."""
    built = curve.curve_of
    earlier: list[weakref.ref] = []

    def watched(s, source=None):
        alive = [r for r in earlier if r() is not None and len(r())]
        assert not alive, f"{len(alive)} earlier GPU's curve alive while {s.host}/{s.gpu}'s is built"
        c = built(s, source)
        earlier.append(weakref.ref(c))
        return c

    monkeypatch.setattr(curve, "curve_of", watched)
    seen = 0
    for _, _, c in curve.curves(con, [(h, g) for h in HOSTS for g in GPUS]):
        seen += len(c) > 0
        del c
    assert seen == len(HOSTS) * len(GPUS)
