"""The pipeline on an s3:// data dir (moto server): `wattline simulate` and `wattline run` with
2 workers write every derived part as an S3 object, equal row for row to a local run of the
same raw data; a corrupt raw object is quarantined on S3 and the rest of the day computes;
`wattline sql` on the S3 data dir answers from a fresh local mirror."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from collectors.storage import DataRoot
from pipeline.cli import main
from pipeline.runner import run_day
from tests.days import builds_a_day
from tests.s3_server import REGION
from tests.scale_out_fleet import DAY, FLEET

DATE = DAY.isoformat()
CLUSTERS = ["c-infer-0", "c-mixed"]
TWO_CLUSTERS = {"fleets": [{"name": "two", "clusters": [c for c in FLEET["fleets"][0]["clusters"] if c["name"] in CLUSTERS]}]}
BAD_KEY = f"power/date={DATE}/host=in-0/zz-corrupt.parquet"


@pytest.fixture(scope="module")
@builds_a_day
def built(s3_server, tmp_path_factory):
    """Simulated raw data on S3 (plus one corrupt object), built once on S3 with 2 workers
    through `wattline run` and once locally (one process) from a copy of the raw files."""
    import boto3

    tmp = tmp_path_factory.mktemp("s3-pipeline")
    mp = pytest.MonkeyPatch()
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "WATTLINE_DATA_DIR"):
        mp.delenv(var, raising=False)
    env = {
        "AWS_ENDPOINT_URL_S3": s3_server, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"), "AWS_EC2_METADATA_DISABLED": "true",
        "WATTLINE_STATE_DIR": str(tmp / "state"), "WATTLINE_WORK_DIR": str(tmp / "work"),
        "WATTLINE_DUCKDB_THREADS": "1",  # one thread per DuckDB: sums in one order, bit-identical
    }
    for k, v in env.items():
        mp.setenv(k, v)
    bucket = f"wattline-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_server, region_name=REGION, aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/fleet"
    fleet = tmp / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(TWO_CLUSTERS))
    sim = CliRunner().invoke(main, ["simulate", "--fleet", str(fleet), "--hours", "0.1", "--seed", "3",
                                    "--start", DATE, "--data-dir", url])
    assert sim.exit_code == 0, sim.output
    root = DataRoot.open(url)
    local = tmp / "local"
    for prefix in ("power", "requests", "job_events"):
        root.mirror(prefix, local)
    root.stage(["inventory.yaml"], local)
    root.write_bytes(BAD_KEY, b"PAR1 this is not a parquet file PAR1")
    single = run_day(local, DATE, workers=1)
    run = CliRunner().invoke(main, ["run", "--date", DATE, "--workers", "2", "--data-dir", url])
    yield root, local, single, run, mp
    mp.undo()


def _parts_local(local):
    return sorted(p.relative_to(local).as_posix() for p in (local / "derived").rglob("*.parquet"))


def _parts_s3(root):
    return sorted(root.list("derived/*/date=*/*.parquet") + root.list("derived/*/date=*/cluster=*/*.parquet"))


def _rows(table):
    """Like tests/test_scale_out.py: the rows as DuckDB returns them, in a canonical order."""
    con = duckdb.connect()
    con.register("part", table)
    return sorted(con.execute("SELECT * FROM part").fetchall(), key=repr)


def test_run_on_s3_writes_every_part_to_the_bucket(built):
    root, local, single, run, _ = built
    assert single.success, single.error
    assert "2 cluster-day run(s) + the fleet-day" in run.output, run.output
    parts = _parts_s3(root)
    assert parts == _parts_local(local)
    tables = {k.split("/")[1] for k in parts}
    assert len(tables) >= 18, tables
    for cluster in CLUSTERS:
        assert f"derived/power_1s/date={DATE}/cluster={cluster}/part-0.parquet" in parts
    assert f"derived/swing_stats/date={DATE}/part-0.parquet" in parts  # the fleet-day's part
    assert not [k for k in root.list("*") if k.endswith(".duckdb")]  # the catalog stays local


def test_s3_parts_equal_a_local_run_row_for_row(built):
    root, local, *_ = built
    for key in _parts_s3(root):
        assert _rows(root.read_parquet(key)) == _rows(pq.read_table(local / key)), key


def test_corrupt_object_is_quarantined_on_s3_and_the_day_computes(built):
    root, _, _, run, _ = built
    assert f"quarantined power file {root.location(BAD_KEY)}" in run.output, run.output
    assert run.exit_code == 1  # files_follow_contract (ERROR) names the file until it is fixed
    assert "files_follow_contract" in run.output
    assert not root.exists(BAD_KEY)
    assert root.exists(f"quarantine/files/{BAD_KEY}")
    log = root.read_parquet(root.list("quarantine/file_log/*.parquet")).to_pylist()
    assert [(r["path"], r["quarantined_path"], r["kind"]) for r in log] == [
        (root.location(BAD_KEY), root.location(f"quarantine/files/{BAD_KEY}"), "unreadable")
    ]


def test_wattline_sql_on_the_s3_data_dir_reads_a_fresh_mirror(built, tmp_path):
    root, local, _, _, mp = built
    runner_work = os.environ["WATTLINE_WORK_DIR"]
    mp.setenv("WATTLINE_WORK_DIR", str(tmp_path / "reader"))  # another machine: nothing local yet
    try:
        query = "select count(*) as n, round(sum(energy_j)) as j from power_1s"
        r = CliRunner().invoke(main, ["sql", "--format", "json", "--data-dir", root.url, query])
        assert r.exit_code == 0, r.output
        expected = CliRunner().invoke(main, ["sql", "--format", "json", "--data-dir", str(local), query])
        assert json.loads(r.output) == json.loads(expected.output) and json.loads(r.output)[0]["n"] > 0
        q = CliRunner().invoke(main, ["sql", "--format", "json", "--data-dir", root.url,
                                      "select path, still_quarantined from quarantined_files"])
        assert json.loads(q.output) == [{"path": root.location(BAD_KEY), "still_quarantined": True}], q.output
        assert (tmp_path / "reader" / "warehouse.duckdb").is_file()
    finally:
        mp.setenv("WATTLINE_WORK_DIR", runner_work)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_a_fresh_machine_re_runs_some_assets_from_the_bucket_alone(built, tmp_path):
    """A new work dir (another machine): the cluster-days' swing_stats stage their own parts
    (power_100ms...), the fleet-day stages every cluster's parts and the trailing hourly_activity;
    the rebuilt parts equal the local run's."""
    root, local, _, _, mp = built
    runner_work = os.environ["WATTLINE_WORK_DIR"]
    mp.setenv("WATTLINE_WORK_DIR", str(tmp_path / "other"))
    try:
        before = {k: root.stat(k).mtime_ns for k in _parts_s3(root)}
        outcome = run_day(root.url, DATE, selection=["swing_stats", "diurnal_profile"], workers=1)
        assert outcome.success, outcome.error
        assert sorted(outcome.materialized) == sorted(["swing_stats"] * len(CLUSTERS) + ["fleet/swing_stats", "diurnal_profile"])
        rebuilt = [k for k in _parts_s3(root) if root.stat(k).mtime_ns != before[k]]
        assert {k.split("/")[1] for k in rebuilt} == {"swing_stats", "diurnal_profile"}, rebuilt
        for key in rebuilt:
            assert _rows(root.read_parquet(key)) == _rows(pq.read_table(local / key)), key
        assert (tmp_path / "other" / "warehouse.duckdb").is_file() and not root.list("*.duckdb")
    finally:
        mp.setenv("WATTLINE_WORK_DIR", runner_work)


def test_wattline_report_and_ui_on_the_s3_data_dir(built, tmp_path, monkeypatch):
    root, *_ , mp = built
    runner_work = os.environ["WATTLINE_WORK_DIR"]
    mp.setenv("WATTLINE_WORK_DIR", str(tmp_path / "reader"))
    try:
        r = CliRunner().invoke(main, ["report", "--date", DATE, "--no-png", "--out", str(tmp_path / "out"), "--data-dir", root.url])
        assert r.exit_code == 0, r.output
        assert (tmp_path / "out" / f"{DATE}.html").is_file()
        assert (tmp_path / "reader" / "derived" / "swing_stats" / f"date={DATE}" / "part-0.parquet").is_file()

        launched = {}
        monkeypatch.setattr(os, "execve", lambda exe, args, env: launched.update(args=args, env=env))
        u = CliRunner().invoke(main, ["ui", "--data-dir", root.url])
        assert u.exit_code == 0, u.output
        assert launched["env"]["WATTLINE_DATA_DIR"] == root.url  # runs launched from the UI use the bucket
        assert launched["env"]["DAGSTER_HOME"] == str(tmp_path / "reader" / ".dagster")
    finally:
        mp.setenv("WATTLINE_WORK_DIR", runner_work)


@pytest.mark.slow  # runs the daily job on a day of its own
def test_unassigned_hosts_and_stale_parts_on_s3(built):
    """Runs last (it changes the bucket): a host missing from the inventory gets the
    _unassigned cluster-day from its S3 files alone; a re-run deletes the day's parts of
    clusters that no longer exist, on S3 too; a host whose files are gone from S3 does not
    linger in the work dir. Both runs rebuild power_1s only, in this process: it reads the raw
    samples (what the _unassigned cluster-day is made of), and a run of a selection deletes the
    gone clusters' parts of the tables it rebuilds (the whole day's 2-worker run is `built`'s)."""
    import pyarrow as pa

    root, *_ = built
    src = root.list(f"power/date={DATE}/host=in-0/*.parquet")[0]
    table = root.read_parquet(src)
    ghost = f"power/date={DATE}/host=ghost-0/part-0.parquet"
    hosts = pa.array(["ghost-0"] * table.num_rows, table.schema.field("host").type)
    root.write_parquet(ghost, table.set_column(table.schema.get_field_index("host"), "host", hosts))
    stale = f"derived/power_1s/date={DATE}/cluster=c-gone/part-0.parquet"
    root.write_bytes(stale, root.read_bytes(f"derived/power_1s/date={DATE}/cluster=c-mixed/part-0.parquet"))

    outcome = run_day(root.url, DATE, selection=["power_1s"], workers=1, fleet_day=False)
    assert outcome.success, outcome.error
    assert outcome.cluster_days == len(CLUSTERS) + 1, outcome
    assert root.read_parquet(f"derived/power_1s/date={DATE}/cluster=_unassigned/part-0.parquet").num_rows > 0
    assert not root.exists(stale)

    root.delete(ghost)
    outcome = run_day(root.url, DATE, selection=["power_1s"], workers=1, fleet_day=False)
    assert outcome.success and outcome.cluster_days == len(CLUSTERS), outcome.error
    assert not root.list(f"derived/*/date={DATE}/cluster=_unassigned/*.parquet")
    assert not list((Path(os.environ["WATTLINE_WORK_DIR"]) / "power" / f"date={DATE}" / "host=ghost-0").glob("*"))
