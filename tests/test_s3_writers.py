"""Writers on an s3:// data dir (a real moto server, tests/s3_server.py) give what they give locally."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.simulate import simulate
from collectors.storage import DataRoot

START = dt.date(2026, 11, 30)


def _local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_tiny_simulation_on_s3_matches_the_local_one(s3, tmp_path):
    url = s3.url("fleet/raw")
    local = simulate(tmp_path / "local", start=START, seed=5, fleet="tiny", hours=0.02)
    remote = simulate(url, start=START, seed=5, fleet="tiny", hours=0.02)
    assert remote.line() == local.line() and remote.power_rows > 0 and remote.requests > 0
    assert all(str(f).startswith(url + "/") for f in remote.files)

    expected = _local_files(tmp_path / "local")
    root = DataRoot.open(url)
    assert s3.keys("fleet/raw/") == [f"fleet/raw/{k}" for k in expected]  # the same keys, nothing else
    for key, data in expected.items():
        assert root.read_bytes(key) == data, key  # byte-identical, so the same rows
    for dataset in ("power", "requests", "job_events"):
        pattern = f"{dataset}/date=*/host=*/*.parquet" if dataset == "power" else f"{dataset}/date=*/*.parquet"
        keys = root.list(pattern)
        assert keys == DataRoot.open(tmp_path / "local").list(pattern)
        rows = root.read_parquet(keys)
        assert rows.num_rows and rows.equals(pa.concat_tables(pq.read_table(tmp_path / "local" / k) for k in keys))


NVIDIA_SMI = Path(__file__).resolve().parent / "data" / "nvidia-smi"


def test_nvidia_smi_import_to_s3_matches_local_and_quarantines_bad_lines(s3, tmp_path):
    from collectors.nvidia_smi import import_files

    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"timestamp, index, power.draw.instant [W], temperature.gpu\n"
                    b"2026/12/01 10:00:00.100, 0, 812.25 W, 40\n"
                    b"yesterday, 0, 100, 40\n"
                    b"2026/12/01 10:00:00.200, 0, 90.5 W, 39\n")
    sources = [NVIDIA_SMI / "h100-qwen3-8b.csv", bad]
    local = import_files(sources, tmp_path / "local", "h100-0", tz="-07:00")
    url = s3.url("site/raw")
    remote = import_files(sources, url, "h100-0", tz="-07:00")
    assert remote.summary("h100-0") == local.summary("h100-0") and remote.rows == 267 and remote.quarantined == 1
    root = DataRoot.open(url)
    power = root.list("power/date=*/host=*/*.parquet")
    assert power == DataRoot.open(tmp_path / "local").list("power/date=*/host=*/*.parquet")
    for key in power:
        assert root.read_bytes(key) == (tmp_path / "local" / key).read_bytes()
    (q,) = root.read_parquet(root.list("quarantine/power/*.parquet")).to_pylist()
    assert q["line_no"] == 3 and q["reason"].startswith("bad timestamp") and q["file"] == str(bad)
    assert sorted(str(w) for w in remote.written) == sorted(root.location(k) for k in power + root.list("quarantine/power/*.parquet"))

    again = import_files(sources, url, "h100-0", tz="-07:00")  # the same files again: replaced, not added
    assert again.rows == 267 and root.list("power/date=*/host=*/*.parquet") == power
    assert len(s3.keys("site/raw/")) == len(power) + 1


def _request_line(i: int, **extra) -> bytes:
    import json

    return (json.dumps({"request_id": f"r{i}", "endpoint": "chat", "arrival_ts": 1_796_216_700 + i,
                        "end_ts": 1_796_216_701 + i, "prompt_tokens": i, "output_tokens": 3, **extra}) + "\n").encode()


def test_request_jsonl_ingest_to_s3_quarantines_the_bad_line_and_is_idempotent(s3, tmp_path):
    from collectors.requests.ingestor import Ingestor
    from collectors.requests.quarantine import read_quarantine

    log = tmp_path / "gateway.jsonl"
    log.write_bytes(_request_line(0) + _request_line(1) + b'{"request_id": "r2", oops\n' + _request_line(3))
    url = s3.url("site/raw")
    ing = Ingestor(url, "jsonl", progress=False)
    ing.ingest([log])
    assert (ing.summary.ingested, ing.summary.quarantined, ing.summary.duplicates) == (3, 1, 0)
    root = DataRoot.open(url)
    rows = root.read_parquet(root.list("requests/date=*/*.parquet"))
    assert sorted(rows.column("request_id").to_pylist()) == ["r0", "r1", "r3"]
    (q,) = read_quarantine(url).to_pylist()
    assert q["line_no"] == 3 and q["reason"].startswith("invalid JSON") and q["raw"] == b'{"request_id": "r2", oops'
    assert q["source_file"] == str(log)

    again = Ingestor(url, "jsonl", progress=False)  # a new process: sees what is stored on S3
    again.ingest([log])
    assert (again.summary.ingested, again.summary.quarantined, again.summary.duplicates) == (0, 0, 3)
    assert len(root.list("requests/date=*/*.parquet")) == 1 and read_quarantine(url).num_rows == 1
    # the writers' lock is a local file in the state dir, never an object in the bucket
    assert (tmp_path / "s3-state" / "requests.lock").exists()
    assert not [k for k in s3.keys() if "/state/" in k]


def test_request_follow_to_s3_keeps_a_local_checkpoint(s3, tmp_path):
    from collectors.requests.ingestor import Ingestor
    from collectors.requests.tail import Follower

    log = tmp_path / "logs" / "app.jsonl"
    log.parent.mkdir()
    log.write_bytes(_request_line(0) + _request_line(1))
    url = s3.url("site/raw")

    def follow():
        return Follower([log], Ingestor(url, "jsonl", progress=False), close_after_s=0.0)

    f = follow()
    f.poll()
    f.flush()
    assert f.checkpoint_path.parent == tmp_path / "s3-state" and f.checkpoint_path.exists()
    with open(log, "ab") as fh:
        fh.write(_request_line(2) + b"not json\n")
    f2 = follow()  # a restart: resumes from the checkpoint, nothing read twice
    f2.poll()
    f2.flush()
    root = DataRoot.open(url)
    ids = root.read_parquet(root.list("requests/date=*/*.parquet")).column("request_id").to_pylist()
    assert sorted(ids) == ["r0", "r1", "r2"] and f2.ingestor.summary.duplicates == 0
    assert f2.ingestor.summary.quarantined == 1


def test_nvml_collector_flushes_to_s3(s3):
    from tests.nvml_helpers import collector_process, series

    url = s3.url("hosts")
    p = collector_process(url, {"gpus": 2}, "--flush-seconds", "1", "--duration-seconds", "2.5", "--no-compact")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    root = DataRoot.open(url)
    files = root.list("power/date=*/host=testhost/nvml-*.parquet")
    assert len(files) >= 2 and not [k for k in s3.keys() if "/." in k]  # flushes, and no temporary key
    t = root.read_parquet(files)
    for g in (0, 1):
        assert len(series(t, g, "nvml-field")) >= 15 and series(t, g, "nvml-buffer")
    assert root.exists("collector/testhost.status.json")


def test_collector_compaction_and_resume_on_s3(s3):
    import json
    import time

    from collectors.nvml.compact import META_KEY, compact_power, roll_forward_in
    from collectors.nvml.counters import Counters
    from collectors.nvml.flusher import HOUR_NS, Flusher
    from collectors.nvml.resume import prepare
    from collectors.nvml.rows import BUFFER
    from tests.test_nvml_units import _table

    url = s3.url("hosts")
    root = DataRoot.open(url)
    now = time.time()  # one reading, passed to the compaction: the current hour stays open however long this takes
    closed, current = int(now // 3600) - 3, int(now // 3600)
    f = Flusher(url, "h", Counters())
    for k in range(3):
        f.add(_table([closed * HOUR_NS + (k * 5 + i) * 10**8 for i in range(5)]))
        f.flush()
    newest_ns = current * HOUR_NS + 9 * 10**8  # the last row of the second file
    for k in range(2):
        f.add(_table([current * HOUR_NS + (k * 5 + i) * 10**8 for i in range(4 + k)], source=BUFFER))
        f.flush()
    sources = root.list("power/date=*/host=h/*.parquet")
    before = sorted(root.read_parquet(sources).column("ts").cast("int64").to_pylist())

    res = compact_power(url, "h", now_unix_s=now)
    assert (res.hours, res.files_in, res.rows) == (1, 3, 15) and str(res.paths[0]).startswith(url)
    after_keys = root.list("power/date=*/host=h/*.parquet")
    assert len(after_keys) == 1 + 2 and sum("-compacted-" in k for k in after_keys) == 1
    assert sorted(root.read_parquet(after_keys).column("ts").cast("int64").to_pylist()) == before
    assert compact_power(url, "h", now_unix_s=now).hours == 0

    # a merge interrupted between the upload and the deletes: a source is still there, rolled forward
    merged = next(k for k in after_keys if "-compacted-" in k)
    listed = json.loads(root.read_schema(merged).metadata[META_KEY])
    folder = merged.rsplit("/", 1)[0]
    root.write_parquet(f"{folder}/{listed[0]}", _table([closed * HOUR_NS]))
    assert roll_forward_in(root, folder) == 1 and root.list(f"{folder}/*.parquet") == sorted(
        k for k in after_keys if k.startswith(folder))

    assert prepare(url, "h") == {0: newest_ns // 1000}  # where the driver buffer trace left off


def test_wattline_simulate_writes_to_an_s3_data_dir(s3, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from pipeline.cli import main

    monkeypatch.chdir(tmp_path)  # (a URL taken as a path would become a folder named "s3:" here)
    r = CliRunner().invoke(main, ["simulate", "--fleet", "tiny", "--hours", "0.02", "--start", "2026-11-30",
                                  "--data-dir", s3.url("cli")])
    assert r.exit_code == 0, r.output
    assert DataRoot.open(s3.url("cli")).list("power/date=*/host=*/*.parquet")
    assert not (tmp_path / "s3:").exists()
