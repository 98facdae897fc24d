"""GPUs that change hands on an ``s3://`` data dir (moto server on 127.0.0.1): `wattline import
assignments` writes the assignments dataset (and its set-aside rows) as objects of the bucket, a
cluster-day run stages them, and one GPU serving ep-a until 12:00 and ep-b after gives each endpoint
exactly its own energy; `wattline sql` on the bucket sees the same `gpu_assignments`."""

import datetime as dt
import json

import duckdb
import pytest

from collectors.storage import DataRoot
from pipeline.runner import run_day
from tests.builders import DAY
from tests.cli_util import invoke
from tests.noon_split import ASSETS, NOON_NS, UUID, _energy, _inventory, _power_day


def _upload(local, root):
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        root.write_bytes(f.relative_to(local).as_posix(), f.read_bytes())


def _table(root, name):
    con = duckdb.connect()
    con.register("t", root.read_parquet(root.list(f"derived/{name}/date={DAY.isoformat()}/cluster=*/*.parquet")))
    return con


@pytest.mark.slow  # runs the daily job on a day of its own
def test_assignments_on_s3_split_the_gpu_at_noon(s3, tmp_path, monkeypatch):
    local = tmp_path / "staging"
    _inventory(local)
    t, w = _power_day(local)
    root = DataRoot.open(s3.url("data"))
    _upload(local, root)
    f = tmp_path / "held.csv"
    noon = dt.datetime.fromtimestamp(NOON_NS / 1e9, dt.UTC).isoformat().replace("+00:00", "Z")
    f.write_text(f"gpu_uuid,kind,name,from_ts,to_ts\n{UUID},endpoint,ep-b,{noon},\n{UUID},endpoint,nobody,{noon},\n")
    out = invoke("import", "assignments", str(f), "--data-dir", root.url)
    assert out.exit_code == 0, out.output
    assert "1 assignment(s) stored, 1 set aside" in out.output
    assert len(root.list("assignments/file-*.parquet")) == 1
    (aside,) = root.list("quarantine/assignments/*.jsonl")
    assert json.loads(root.read_bytes(aside))["reason"] == "no endpoint named 'nobody' in the inventory"
    assert not [k for k in s3.keys() if "tmp" in k.rsplit("/", 1)[-1]]  # nothing half-written left behind

    monkeypatch.setenv("WATTLINE_WORK_DIR", str(tmp_path / "work"))
    outcome = run_day(root.url, DAY.isoformat(), selection=ASSETS.split(","), fleet_day=False)
    assert outcome.success, outcome.error
    got = dict(_table(root, "phase_intervals").execute("SELECT endpoint, sum(energy_j) FROM t GROUP BY 1").fetchall())
    per_token = dict(_table(root, "energy_per_token").execute(
        "SELECT endpoint, energy_j FROM t WHERE bucket_kind = 'all'").fetchall())
    want = {"ep-a": _energy(t, w, t[0], NOON_NS), "ep-b": _energy(t, w, NOON_NS, t[-1])}
    for ep in want:
        assert got[ep] == pytest.approx(want[ep], rel=1e-6), (ep, got, want)
        assert per_token[ep] == pytest.approx(want[ep], rel=1e-6)
    assert got["ep-a"] + got["ep-b"] == pytest.approx(_energy(t, w, t[0], t[-1]), rel=1e-6)

    monkeypatch.setenv("WATTLINE_WORK_DIR", str(tmp_path / "reader"))  # another machine: nothing local yet
    q = invoke("sql", "--format", "json", "--data-dir", root.url,
               "select name, source, epoch_ns(from_ts) as from_ns from gpu_assignments where host = 'infer-0' and gpu = 0 order by from_ns nulls first")
    assert q.exit_code == 0, q.output
    assert json.loads(q.output) == [{"name": "ep-a", "source": "inventory-lists", "from_ns": None},
                                    {"name": "ep-b", "source": "file", "from_ns": NOON_NS}]


def test_import_assignments_on_s3_without_an_inventory_is_one_error_line(s3, tmp_path):
    f = tmp_path / "held.csv"
    f.write_text("host,gpu,kind,name\ninfer-0,0,endpoint,ep-b\n")
    out = invoke("import", "assignments", str(f), "--data-dir", s3.url("data"))
    assert out.exit_code == 2, out.output
    assert out.output.count("error:") == 1 and "no inventory file" in out.output and "Traceback" not in out.output
    assert s3.keys() == []
