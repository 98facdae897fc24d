"""DataRoot: the same small API over a local folder and an S3 prefix (a real moto server, see s3_server.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from collectors import atomic
from collectors.storage import DataRoot, resolve_data_root


def _table(n: int = 3, offset: int = 0) -> pa.Table:
    return pa.table({"x": pa.array(range(offset, offset + n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> DataRoot:
    if request.param == "local":
        return DataRoot.open(tmp_path / "data")
    return DataRoot.open(request.getfixturevalue("s3").url("team/data"))


def test_round_trip_write_list_read_move_delete(root, tmp_path):
    a = root.write_parquet("power/date=2026-12-01/host=h0/a.parquet", _table())
    root.write_parquet("power/date=2026-12-01/host=h1/b.parquet", _table(2, 10))
    root.write_parquet("power/date=2026-12-02/host=h0/c.parquet", _table(1, 20))
    root.write_bytes("power/date=2026-12-01/host=h0/notes.txt", b"not parquet")
    root.write_bytes("inventory.yaml", b"fleets: []\n")
    assert str(a) == root.location("power/date=2026-12-01/host=h0/a.parquet").__str__()

    assert root.list("power/date=*/host=*/*.parquet") == [
        "power/date=2026-12-01/host=h0/a.parquet",
        "power/date=2026-12-01/host=h1/b.parquet",
        "power/date=2026-12-02/host=h0/c.parquet",
    ]
    assert root.list("power/date=2026-12-01/host=*/*.parquet") == root.list("power/date=*/host=*/*.parquet")[:2]
    assert root.list("*.yaml") == ["inventory.yaml"] and root.list("nothing/*/*.parquet") == []
    assert root.read_bytes("inventory.yaml") == b"fleets: []\n"
    both = root.read_parquet(root.list("power/date=2026-12-01/host=*/*.parquet"))
    assert both.column("x").to_pylist() == [0, 1, 2, 10, 11]
    assert root.read_parquet("power/date=2026-12-02/host=h0/c.parquet", columns=["x"]).to_pydict() == {"x": [20]}
    assert root.read_schema("power/date=2026-12-01/host=h0/a.parquet").names == ["x", "s"]

    key = "power/date=2026-12-02/host=h0/c.parquet"
    st = root.stat(key)
    assert root.exists(key) and st.size > 0 and abs(st.mtime_ns / 1e9 - time.time()) < 120
    assert not root.exists("power/date=2026-12-02/host=h0/none.parquet")
    with pytest.raises(FileNotFoundError):
        root.stat("power/date=2026-12-02/host=h0/none.parquet")

    moved = root.move(key, "quarantine/files/" + key)
    assert not root.exists(key) and root.exists("quarantine/files/" + key)
    assert str(moved).endswith("quarantine/files/" + key)
    assert root.read_parquet("quarantine/files/" + key).to_pydict() == _table(1, 20).to_pydict()
    root.delete("quarantine/files/" + key)
    root.delete("quarantine/files/" + key)  # missing_ok by default
    with pytest.raises(FileNotFoundError):
        root.delete("quarantine/files/" + key, missing_ok=False)
    assert root.list("quarantine/*/*/*/*/*.parquet") == []
    assert root.list("power/date=2026-12-02/host=*/*.parquet") == []


def test_writer_temp_files_are_never_listed(tmp_path, s3):
    local = DataRoot.open(tmp_path / "d")
    (tmp_path / "d/power/date=2026-12-01/host=h").mkdir(parents=True)
    (tmp_path / "d/power/date=2026-12-01/host=h" / f"{atomic.TMP_PREFIX}x.parquet").write_bytes(b"partial")
    assert local.list("power/date=*/host=*/*.parquet") == []
    remote = DataRoot.open(s3.url("p"))
    s3.put(f"p/power/date=2026-12-01/host=h/{atomic.TMP_PREFIX}x.parquet", b"partial")
    s3.put("p/power/date=2026-12-01/host=h/ok.parquet", b"whole")
    assert remote.list("power/date=*/host=*/*.parquet") == ["power/date=2026-12-01/host=h/ok.parquet"]


def test_stage_downloads_once_and_is_a_no_op_locally(root, tmp_path):
    keys = [root.write_parquet(f"requests/date=2026-12-0{d}/r.parquet", _table(d)) and f"requests/date=2026-12-0{d}/r.parquet"
            for d in (1, 2)]
    work = tmp_path / "work"
    paths = root.stage(keys, work)
    if root.is_local:
        assert paths == [root.location(k) for k in keys] and not work.exists()
        return
    assert paths == [work / k for k in keys]
    assert [pa.parquet.read_table(p).num_rows for p in paths] == [1, 2]
    before = [p.stat().st_ino for p in paths]
    assert root.stage(keys, work) == paths and [p.stat().st_ino for p in paths] == before  # up to date: kept
    root.write_parquet(keys[0], _table(5))  # changed remotely (size differs): fetched again
    assert pa.parquet.read_table(root.stage(keys[:1], work)[0]).num_rows == 5


def test_upload_publishes_a_local_file(root, tmp_path):
    local = tmp_path / "out.parquet"
    atomic.write_parquet_atomic(_table(4), local)
    root.upload(local, "derived/power_1s/date=2026-12-01/part-0.parquet")
    assert root.read_parquet("derived/power_1s/date=2026-12-01/part-0.parquet").num_rows == 4
    assert root.read_bytes("derived/power_1s/date=2026-12-01/part-0.parquet") == local.read_bytes()


def test_mirror_syncs_a_prefix_incrementally(root, tmp_path):
    for t in ("a", "b"):
        root.write_parquet(f"derived/{t}/date=2026-12-01/part-0.parquet", _table())
    root.write_parquet("power/date=2026-12-01/host=h/p.parquet", _table())  # outside the prefix
    cache = tmp_path / "cache"
    first = root.mirror("derived", cache)
    assert (first.downloaded, first.deleted, first.unchanged) == (2, 0, 0)
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*.parquet")) == [
        "derived/a/date=2026-12-01/part-0.parquet", "derived/b/date=2026-12-01/part-0.parquet"]
    again = root.mirror("derived", cache)
    assert (again.downloaded, again.deleted, again.unchanged) == (0, 0, 2)

    root.write_parquet("derived/a/date=2026-12-01/part-0.parquet", _table(7))  # replaced: new size
    root.write_parquet("derived/a/date=2026-12-02/part-0.parquet", _table())  # added
    root.delete("derived/b/date=2026-12-01/part-0.parquet")  # gone
    third = root.mirror("derived", cache)
    assert (third.downloaded, third.deleted, third.unchanged) == (2, 1, 0)
    assert pa.parquet.read_table(cache / "derived/a/date=2026-12-01/part-0.parquet").num_rows == 7
    assert not (cache / "derived/b").exists()  # emptied folders go too
    assert not (cache / "power").exists()


def test_mirror_of_a_local_root_onto_itself_is_a_no_op(tmp_path):
    root = DataRoot.open(tmp_path)
    root.write_parquet("derived/a/date=2026-12-01/part-0.parquet", _table())
    res = root.mirror("derived", tmp_path)
    assert (res.downloaded, res.deleted, res.unchanged) == (0, 0, 1)


def test_an_interrupted_write_leaves_no_object_and_keeps_the_old_one(root, monkeypatch, s3, tmp_path):
    key = "power/date=2026-12-01/host=h/sim.parquet"
    root.write_parquet(key, _table(2))
    old = root.read_bytes(key)
    real = atomic.write_parquet_to

    def dies_half_way(table, sink, row_group_size=1_000_000):
        sink.write(b"PAR1 and then some bytes")  # part of a file reached the sink...
        raise KeyboardInterrupt  # ...then the writer is interrupted

    monkeypatch.setattr(atomic, "write_parquet_to", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        root.write_parquet(key, _table(50))
    with pytest.raises(KeyboardInterrupt):
        root.write_parquet("power/date=2026-12-01/host=h/new.parquet", _table(50))
    monkeypatch.setattr(atomic, "write_parquet_to", real)
    assert root.read_bytes(key) == old
    assert root.list("power/date=*/host=*/*") == [key]
    if root.is_local:
        assert sorted(p.name for p in root.location("power/date=2026-12-01/host=h").iterdir()) == ["sim.parquet"]
    else:
        assert s3.keys() == [f"team/data/{key}"]  # nothing else in the bucket, not even a temporary key


def test_endpoint_from_aws_endpoint_url_and_resolve(s3, monkeypatch, tmp_path):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    root = DataRoot.open(s3.url() + "/")
    assert root.url == f"s3://{s3.name}"
    root.write_bytes("x/y.bin", b"1")
    assert s3.keys() == ["x/y.bin"] and s3.get("x/y.bin") == b"1"
    assert resolve_data_root(f"s3://{s3.name}/a/b/") == f"s3://{s3.name}/a/b"
    monkeypatch.chdir(tmp_path)
    assert resolve_data_root("rel") == tmp_path / "rel"
    monkeypatch.setenv("WATTLINE_DATA_DIR", f"s3://{s3.name}/env")
    assert resolve_data_root(None) == f"s3://{s3.name}/env"
    assert root.state_dir() == Path(os.environ["WATTLINE_STATE_DIR"])
    assert DataRoot.open(tmp_path / "d").state_dir() == tmp_path / "d" / "state"
