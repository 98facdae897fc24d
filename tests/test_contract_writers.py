"""Parquet as ordinary tools write it is accepted when it converts without loss, and says so.

pandas, polars and DuckDB write naive timestamps, int64 GPU indexes and float64 watts by default;
an older exporter leaves out the nullable ``power_limit_w``; a site's adds a ``rack`` column.
Each host below is written one of those ways; the day must be computed with all of them (per
second, equal to a reference computed here from the raw samples), the WARN checks must name the
files, and a genuinely drifted file (watts as strings) must still be quarantined.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.contract import POWER, REQUESTS, convert, inspect_file
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table, square_wave, two_host_inventory
from tests.cli_util import invoke, one_line_error
from tests.days import builds_a_day

DATE = DAY.isoformat()
SECONDS = 20
WAVES = {("train-0", 0): (100.0, 700.0), ("train-0", 1): (150.0, 650.0), ("infer-0", 0): (200.0, 200.0), ("infer-0", 1): (250.0, 250.0)}


def _folder(data_dir: Path, host: str) -> Path:
    folder = data_dir / "power" / f"date={DATE}" / f"host={host}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_pandas(path: Path, host: str, gpu: int, t_ns, p) -> None:
    """pandas' defaults: naive datetime64, int64 gpu, float64 watts, object strings."""
    pd.DataFrame({"ts": pd.to_datetime(t_ns), "host": host, "gpu": gpu, "power_w": p, "source": "site-exporter"}).to_parquet(path)


def write_polars(path: Path, host: str, gpu: int, t_ns, p) -> None:
    """polars' defaults: naive Datetime(ns), i64, f64, large strings."""
    pl.DataFrame({"ts": pl.Series(t_ns).cast(pl.Datetime("ns")), "host": host, "gpu": gpu, "power_w": p, "source": "site-exporter"}).write_parquet(path)


def write_duckdb(path: Path, host: str, gpu: int, t_ns, p) -> None:
    """DuckDB's: TIMESTAMP (naive µs), INTEGER gpu, DOUBLE watts."""
    samples = pa.table({"t_us": pa.array(np.asarray(t_ns) // 1000), "p": pa.array(p, pa.float64())})  # noqa: F841 (read by DuckDB)
    duckdb.connect().execute(
        f"COPY (SELECT make_timestamp(t_us) AS ts, '{host}' AS host, {gpu} AS gpu, p AS power_w, 'site-exporter' AS source "
        f"FROM samples) TO '{path}' (FORMAT parquet)"
    )


def write_old_exporter(path: Path, host: str, gpu: int, t_ns, p) -> None:
    """pyarrow with the contract's types, but no ``power_limit_w`` and one extra column ``rack``."""
    table = power_table(host, gpu, t_ns, p).drop_columns(["power_limit_w"])
    pq.write_table(table.append_column("rack", pa.array(["r7"] * table.num_rows)), path)


WRITERS = {("train-0", 0): write_pandas, ("train-0", 1): write_polars, ("infer-0", 0): write_duckdb, ("infer-0", 1): write_old_exporter}


def _reference_1s(low: float, high: float) -> list[tuple[dt.datetime, float]]:
    """Per-second mean of the raw samples of one GPU, from the arrays themselves."""
    t_ns, p = square_wave(SECONDS, 4.0, low, high)
    second = (t_ns // 10**9) * 10**9
    out = {}
    for s, w in zip(second.tolist(), p.tolist(), strict=False):
        out.setdefault(s, []).append(w)
    return [(dt.datetime.fromtimestamp(s / 1e9, dt.UTC), sum(v) / len(v)) for s, v in sorted(out.items())]


@pytest.fixture(scope="module")
@builds_a_day
def day(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("writers") / "data"
    two_host_inventory(data_dir)
    files = {}
    for (host, gpu), (low, high) in WAVES.items():
        t_ns, p = square_wave(SECONDS, 4.0, low, high)
        writer = WRITERS[(host, gpu)]
        files[(host, gpu)] = path = _folder(data_dir, host) / f"{host}-{gpu}-{writer.__name__}.parquet"
        writer(path, host, gpu, t_ns, p)
    drifted = _folder(data_dir, "train-0") / "train-0-0-strings.parquet"
    t_ns, p = square_wave(SECONDS, 4.0, 1.0, 1.0)
    pd.DataFrame({"ts": pd.to_datetime(t_ns, utc=True), "host": "train-0", "gpu": 0, "power_w": [f"{w:.1f}" for w in p], "source": "site-exporter"}).to_parquet(
        drifted
    )
    originals = {key: pq.read_schema(path) for key, path in files.items()}
    outcome = run_day(data_dir, DATE, selection=["power_1s"], fleet_day=False)
    return {
        "dir": data_dir,
        "files": files,
        "drifted": drifted,
        "originals": originals,
        "outcome": outcome,
        "checks": {c.check: c for c in outcome.failed_checks},
        "power_1s": read_day(data_dir, "power_1s", DATE),
    }


def test_each_writer_s_defaults_are_what_the_issue_says(day):
    """Known inputs first: the files really are naive / int64 / float64 / missing / extra."""
    o = day["originals"]
    for key in [("train-0", 0), ("train-0", 1), ("infer-0", 0)]:
        assert o[key].field("ts").type.tz is None, key
        assert o[key].field("power_w").type == pa.float64(), key
    assert o[("train-0", 0)].field("gpu").type == pa.int64() and o[("train-0", 1)].field("ts").type.unit == "ns"
    assert o[("infer-0", 0)].field("gpu").type == pa.int32()
    assert "power_limit_w" not in o[("infer-0", 1)].names and "rack" in o[("infer-0", 1)].names


def test_the_day_is_computed_with_every_host_equal_to_the_raw_samples(day):
    table = day["power_1s"]
    for (host, gpu), (low, high) in WAVES.items():
        rows = table.filter(pa.compute.and_(pa.compute.equal(table["host"], host), pa.compute.equal(table["gpu"], gpu))).sort_by("ts")
        got = list(zip(rows["ts"].to_pylist(), rows["mean_w"].to_pylist(), strict=False))
        want = _reference_1s(low, high)
        assert [t for t, _ in got] == [t for t, _ in want], (host, gpu)  # naive read as UTC: no shift
        assert np.allclose([w for _, w in got], [w for _, w in want], atol=1e-3), (host, gpu)
        assert sum(rows["samples"].to_pylist()) == SECONDS * 10


def test_warn_checks_name_the_converted_files_and_what_was_converted(day):
    naive = day["checks"]["naive_timestamps_read_as_utc"]
    assert naive.severity == "WARN" and "3 file(s)" in naive.description
    casts = day["checks"]["files_accepted_with_casts"]
    assert casts.severity == "WARN" and "4 file(s)" in casts.description
    converted = {e["path"]: e["reason"] for e in day["outcome"].converted}
    assert set(converted) == {str(p) for p in day["files"].values()}
    assert "naive timestamps read as UTC: 'ts'" in converted[str(day["files"][("train-0", 0)])]
    assert "'gpu' int64 → uint8" in converted[str(day["files"][("train-0", 0)])]
    old = converted[str(day["files"][("infer-0", 1)])]
    assert "'power_limit_w'" in old and "extra column(s) ignored: 'rack'" in old and "naive" not in old
    for path in day["files"].values():  # rewritten in the contract's exact types, original kept
        assert pq.read_schema(path).remove_metadata() == POWER.remove_metadata()
    for entry in day["outcome"].converted:
        assert Path(entry["quarantined_path"]).exists() and "quarantine/files/power" in entry["quarantined_path"]


def test_a_drifted_file_is_still_quarantined_with_its_reason(day):
    [entry] = day["outcome"].quarantined
    assert entry["path"] == str(day["drifted"]) and entry["kind"] == "schema"
    assert "column 'power_w' is large_string, the contract says float" in entry["reason"] or "column 'power_w' is string" in entry["reason"]
    check = day["checks"]["files_follow_contract"]
    assert check.severity == "ERROR" and str(day["drifted"]) in check.description
    assert not day["drifted"].exists()


def test_out_of_range_values_are_quarantined_not_wrapped(tmp_path):
    t_ns, p = square_wave(1, 1.0, 100.0, 100.0)
    cases = {
        "gpu-negative": {"gpu": -1, "power_w": p},
        "gpu-too-big": {"gpu": 300, "power_w": p},
        "mem-negative": {"gpu": 0, "power_w": p, "mem_used_mib": -5},
        "power-beyond-float32": {"gpu": 0, "power_w": np.full(len(p), 1e39)},
    }
    for name, cols in cases.items():
        path = tmp_path / f"{name}.parquet"
        pd.DataFrame({"ts": pd.to_datetime(t_ns, utc=True), "host": "h", "source": "x", **cols}).to_parquet(path)
        verdict = inspect_file(path, POWER)
        assert not verdict.usable and "has values" in verdict.problems[0], (name, verdict)


def test_conversions_that_are_not_lossless_stay_problems():
    t_ns, p = square_wave(1, 1.0, 100.0, 100.0)
    base = power_table("h", 0, t_ns, p)
    floaty_gpu = base.set_column(2, "gpu", base["gpu"].cast(pa.float64()))
    epoch_ts = base.set_column(0, "ts", pa.compute.cast(base["ts"], pa.int64()))
    no_host = base.drop_columns(["host"])
    for table, fragment in [(floaty_gpu, "'gpu' is double"), (epoch_ts, "'ts' is int64"), (no_host, "missing column 'host'")]:
        with pytest.raises(Exception, match=fragment):
            convert(table, POWER)
    # sub-µs digits of a power timestamp are cut (documented); other datasets keep ns
    ns = pa.table({"ts": pa.array([1_764_460_800_000_000_999], pa.timestamp("ns"))})
    got, _ = convert(base.slice(0, 1).set_column(0, "ts", ns["ts"]), POWER)
    assert got["ts"][0].value == 1_764_460_800_000_000
    req = pa.table(
        {
            "request_id": ["a"],
            "endpoint": ["e"],
            "arrival_ts": pa.array([1_764_460_800_000_000_999], pa.timestamp("ns")),
            "prompt_tokens": pa.array([5], pa.int64()),
            "output_tokens": pa.array([7], pa.int64()),
        }
    )
    got, plan = convert(req, REQUESTS)
    assert got["arrival_ts"][0].value == 1_764_460_800_000_000_999 and plan.naive == ["arrival_ts"]
    assert plan.absent == ["prefill_start_ts", "first_token_ts", "end_ts", "status"]


def _check_dir(tmp_path):
    folder = tmp_path / "export" / "power" / f"date={DATE}" / "host=h"
    folder.mkdir(parents=True)
    t_ns, p = square_wave(2, 1.0, 100.0, 200.0)
    pq.write_table(power_table("h", 0, t_ns, p), folder / "good.parquet")
    pq.write_table(power_table("h", 3, t_ns, p).select(["ts", "host", "gpu", "power_w", "source"]), folder / "minimal.parquet")
    write_pandas(folder / "castable.parquet", "h", 1, t_ns, p)
    pd.DataFrame({"ts": pd.to_datetime(t_ns, utc=True), "host": "h", "gpu": 2, "power_w": [str(w) for w in p], "source": "x"}).to_parquet(
        folder / "bad.parquet"
    )
    return folder


def test_wattline_check_good_castable_and_bad_files(tmp_path):
    folder = _check_dir(tmp_path)
    before = sorted(p.stat().st_mtime_ns for p in folder.iterdir())
    good = invoke("check", str(folder / "good.parquet"))
    assert good.exit_code == 0 and good.output.startswith("ok ") and "(power)" in good.output
    castable = invoke("check", str(folder / "castable.parquet"))
    assert castable.exit_code == 0 and castable.output.startswith("casts ")
    assert "naive timestamps read as UTC: 'ts'" in castable.output and "'gpu' int64 → uint8" in castable.output
    bad = invoke("check", str(folder / "bad.parquet"))
    assert bad.exit_code == 1 and bad.output.startswith("quarantine ") and "column 'power_w' is" in bad.output
    everything = invoke("check", str(tmp_path / "export"))
    lines = everything.output.splitlines()
    assert everything.exit_code == 1 and [line.split()[0] for line in lines[:4]] == ["quarantine", "casts", "ok", "ok"]
    assert "minimal.parquet (power): absent nullable column(s) read as NULL: 'gpu_uuid'" in lines[3]
    assert "3 of 4 file(s) would be used, 1 quarantined" in everything.output
    assert sorted(p.stat().st_mtime_ns for p in folder.iterdir()) == before and not (tmp_path / "export" / "quarantine").exists()


def test_wattline_check_usage_errors(tmp_path):
    one_line_error(invoke("check", str(tmp_path / "nope.parquet")), "no such file or directory")
    loose = tmp_path / "loose.parquet"
    pq.write_table(pa.table({"x": [1]}), loose)
    one_line_error(invoke("check", str(loose)), "cannot tell the dataset", "--dataset")
    r = invoke("check", str(loose), "--dataset", "requests")
    assert r.exit_code == 1 and "missing column 'request_id'" in r.output
    assert invoke("check", str(loose), "--dataset", "bogus").exit_code == 2


@pytest.mark.slow  # runs the daily job on a day of its own
def test_on_an_s3_data_dir_the_converted_file_and_its_original_are_in_the_bucket(s3, tmp_path, monkeypatch):
    """The rewrite is what every machine reads: the converted object replaces the file in the
    bucket, the original is uploaded under quarantine/files/, the log row names both by URL."""
    from collectors.storage import DataRoot

    monkeypatch.setenv("WATTLINE_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("WATTLINE_DUCKDB_THREADS", "1")
    local = tmp_path / "local"
    two_host_inventory(local)
    key = f"power/date={DATE}/host=infer-0/infer-0-0-pandas.parquet"
    t_ns, p = square_wave(SECONDS, 4.0, 200.0, 200.0)
    (local / key).parent.mkdir(parents=True)
    write_pandas(local / key, "infer-0", 0, t_ns, p)
    original = (local / key).read_bytes()
    root = DataRoot.open(s3.url("data"))
    root.upload(local / "inventory.yaml", "inventory.yaml")
    root.upload(local / key, key)
    outcome = run_day(root.url, DATE, selection=["power_1s"], workers=1, fleet_day=False)
    assert outcome.success, outcome.error
    [entry] = outcome.converted
    assert entry["path"] == root.location(key) and entry["quarantined_path"] == root.location(f"quarantine/files/{key}")
    assert s3.get(f"data/quarantine/files/{key}") == original
    assert pq.read_table(pa.BufferReader(s3.get(f"data/{key}"))).schema.remove_metadata() == POWER.remove_metadata()
    assert {c.check for c in outcome.failed_checks} >= {"naive_timestamps_read_as_utc", "files_accepted_with_casts"}
    [part] = [k for k in s3.keys("data/derived/power_1s/") if k.endswith(".parquet")]
    assert pq.read_table(pa.BufferReader(s3.get(part))).num_rows == SECONDS  # one GPU, every second
