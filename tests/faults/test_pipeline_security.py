"""Issue 5, Security: `wattline sql` is read-only and sees only the data dir; the UI binds to
loopback unless told; no credentials in the repository (logs: see test_pipeline_concurrency)."""

from __future__ import annotations

import hashlib
import re
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import warehouse
from pipeline.cli import ui
from pipeline.constants import REPO_ROOT
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """A data dir with a published catalog (no Dagster run needed), and a Parquet file outside it."""
    root = tmp_path_factory.mktemp("security")
    data_dir = root / "data"
    write_square_fleet(data_dir, seconds=2)
    warehouse.publish(data_dir)
    pq.write_table(pa.table({"secret": ["outside"]}), root / "outside.parquet")
    (data_dir / "link-out").symlink_to(root)
    return data_dir


def _snapshot(data_dir):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data_dir.rglob("*")) if p.is_file() and ".lock" not in p.name}


@pytest.mark.parametrize(
    "statement, reason",
    [
        ("create table x as select 1", "CREATE"),
        ("insert into inventory_gpus select * from inventory_gpus", "INSERT"),
        ("update inventory_gpus set tdp_w = 1", "UPDATE"),
        ("delete from inventory_gpus", "DELETE"),
        ("drop view power_1s", "DROP"),
        ("alter table inventory_gpus rename to x", "ALTER"),
        ("copy (select 1) to '{data}/out.csv'", "COPY"),
        ("copy inventory_gpus to '{data}/power/date=2026-11-30/host=x/planted.parquet'", "COPY"),
        ("explain analyze copy (select 1) to '{data}/out.csv'", "EXPLAIN of a COPY"),
        ("/* hidden */ EXPLAIN (format json) copy (select 1) to '{data}/out.csv'", "EXPLAIN of a COPY"),
        ("attach '{data}/other.duckdb' as o", "ATTACH"),
        ("install httpfs", "LOAD"),
        ("load httpfs", "LOAD"),
        ("explain analyze install httpfs", "EXPLAIN of a LOAD"),
        ("set enable_external_access = true", "SET"),
        ("pragma enable_profiling", "PRAGMA"),
        ("call pragma_version()", "CALL"),
        ("select 1; select 2", "one statement"),
    ],
)
def test_sql_refuses_writes_and_escapes(catalog, statement, reason):
    """Fault: a statement that writes, attaches, copies out or loads code. Must survive: the
    catalog and every file of the data dir (byte-identical after), with a one-line refusal."""
    before = _snapshot(catalog)
    one_line_error(invoke("sql", statement.format(data=catalog), "--data-dir", str(catalog)), reason)
    assert _snapshot(catalog) == before


@pytest.mark.parametrize(
    "query",
    [
        "select * from read_csv('/etc/passwd')",
        "select * from read_text('/etc/hostname')",
        "select * from glob('/etc/*')",
        "select * from read_parquet('{data}/../outside.parquet')",
        "select * from read_parquet('{data}/link-out/outside.parquet')",
        "select * from read_csv('https://example.com/data.csv')",
    ],
    ids=["absolute", "read_text", "glob", "dot-dot", "symlink-out", "remote"],
)
def test_sql_cannot_read_outside_the_data_dir(catalog, query):
    """Fault: a query naming a host file outside the data dir (directly, by `..`, through a
    symlink inside it, or remote). Must survive: the file's secrecy; refused by DuckDB itself."""
    one_line_error(invoke("sql", query.format(data=catalog), "--data-dir", str(catalog)), "Permission Error")


def test_sql_reads_inside_the_data_dir_and_explains_selects(catalog):
    """The locks do not block what `sql` is for: reading the data dir's Parquet, EXPLAIN ANALYZE."""
    inside = invoke("sql", f"select count(*) as n from read_parquet('{catalog}/power/*/*/*.parquet')", "--format", "csv", "--data-dir", str(catalog))
    assert inside.exit_code == 0 and inside.output.splitlines()[-1] == "80", inside.output
    assert invoke("sql", "explain analyze select count(*) from power", "--data-dir", str(catalog)).exit_code == 0


def test_ui_binds_loopback_unless_remote_is_allowed(catalog, monkeypatch):
    """Issue 21 item 8: the UI has no login and launches runs, so a non-loopback --host is
    refused (one line, exit 2, nothing started) unless --allow-remote, which prints a warning."""
    calls = []
    monkeypatch.setattr(ui.os, "execve", lambda path, args, env: calls.append(args))
    assert invoke("ui", "--data-dir", str(catalog)).exit_code == 0
    assert invoke("ui", "--host", "::1", "--data-dir", str(catalog)).exit_code == 0
    for host in ("0.0.0.0", "::", "192.168.1.5"):
        one_line_error(invoke("ui", "--host", host, "--data-dir", str(catalog)), host, "--allow-remote")
    allowed = invoke("ui", "--host", "0.0.0.0", "--allow-remote", "--data-dir", str(catalog))
    assert allowed.exit_code == 0 and "warning: the Dagster UI" in allowed.output and "without authentication" in allowed.output
    hosts = [args[args.index("--host") + 1] for args in calls]
    assert hosts == ["127.0.0.1", "::1", "0.0.0.0"]


CREDENTIAL_PATTERNS = {
    "AWS access key id": r"\bAKIA[0-9A-Z]{16}\b",
    "private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    "GitHub token": r"\bgh[pousr]_[A-Za-z0-9]{36}\b",
    "Slack token": r"\bxox[abpr]-[A-Za-z0-9-]{10,}",
    "password in a URL": r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s:@'\"]+@",
    "assigned password": r"(?i)\b(password|passwd|api_key|secret_key)\b\s*[:=]\s*['\"][^'\"\s]{6,}['\"]",
}


def test_no_credentials_in_the_repository():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = REPO_ROOT / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        text = path.read_text(errors="replace")
        found += [(name, what) for what, pattern in CREDENTIAL_PATTERNS.items() if re.search(pattern, text)]
    assert found == []
