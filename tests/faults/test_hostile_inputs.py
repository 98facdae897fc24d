"""Issue 21, items 4 and 5: hostile or broken inputs end as one `error:` line (exit 2) or as
quarantined lines, never as a traceback, a crash of the whole file, or a command that never ends.

Data dirs that are a file or read-only; days outside the partitions (run, simulate, request
logs, nvidia-smi); `run --select` of an unknown asset; `simulate` failing midway (the old
inventory stays); a JSONL line of 200 KB of nested arrays (bulk and `--follow`); `/dev/zero` as
an input; nvidia-smi logs with a BOM or in UTF-16, dated year 1, 2300 or 9999, or a bad `--tz`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.days import FIRST_DAY
from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from collectors.requests.tail import Follower
from collectors.simulate import writer
from pipeline import warehouse
from tests.builders import write_square_fleet
from tests.cli_util import invoke, one_line_error
from tests.clock import before_midnight, midnight_after, pin

WATTLINE = Path(sys.executable).with_name("wattline")
SMI = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi" / "a100-smoke-run-1784415083.csv"
RANGE = f"outside the days the pipeline can run ({FIRST_DAY}.."
TODAY = dt.date(2026, 11, 30)
"""The day the clock is pinned to where a test is about today's range."""


def _request(i: int, day: str = "2026-12-01", **extra) -> dict:
    return dict(request_id=f"r{i}", endpoint="e", arrival_ts=f"{day}T00:00:{i % 60:02d}Z",
                end_ts=f"{day}T00:01:{i % 60:02d}Z", prompt_tokens=10, output_tokens=5, **extra)


def _jsonl(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines))
    return path


def _stored_ids(data_dir: Path) -> list[str]:
    files = sorted((data_dir / "requests").glob("date=*/*.parquet"))
    return sorted(pa.concat_tables([pq.read_table(f) for f in files]).column("request_id").to_pylist()) if files else []


def _commands(data_dir: Path, tmp_path: Path) -> dict[str, list[str]]:
    log = _jsonl(tmp_path / "ok.jsonl", [_request(1)])
    return {
        "simulate": ["simulate", "--fleet", "tiny", "--hours", "0.01", "--start", "2026-11-30"],
        "import": ["import", "nvidia-smi", str(SMI), "--host", "h0", "--tz", "UTC"],
        "ingest": ["ingest", "requests", "--allow-unknown-endpoint", str(log)],
        "run": ["run", "--date", "2026-11-30"],
        "sql": ["sql", "select 1"],
        "report": ["report", "--date", "2026-11-30"],
    }


# ---- data dirs that cannot serve the command


@pytest.mark.parametrize("command", ["simulate", "import", "ingest", "run", "sql", "report"])
def test_data_dir_that_is_a_file(tmp_path, command):
    """Fault: --data-dir names a file. Today: tracebacks, or 'does not exist'. Must: one line saying what it is."""
    data_file = tmp_path / "data"
    data_file.write_text("not a folder\n")
    result = invoke(*_commands(data_file, tmp_path)[command], "--data-dir", str(data_file))
    one_line_error(result, str(data_file), "is a file")
    assert data_file.read_text() == "not a folder\n"
    sub = invoke(*_commands(data_file, tmp_path)[command], "--data-dir", str(data_file / "sub"))
    one_line_error(sub, "is a file")


@contextlib.contextmanager
def read_only_dir(where: Path):
    """``where`` made read-only for real: a tmpfs remounted read-only when root (root ignores
    permission bits), else mode 0555."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], capture_output=True)
        if r.returncode != 0:
            pytest.skip("root without CAP_SYS_ADMIN: cannot make a read-only filesystem")
        try:
            yield lambda: subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        finally:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
    else:
        try:
            yield lambda: [p.chmod(0o555) for p in [where, *where.rglob("*")] if p.is_dir()]
        finally:
            for p in [where, *where.rglob("*")]:
                if p.is_dir():
                    p.chmod(0o755)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_only_data_dir(tmp_path):
    """Fault: the data dir (with data and a catalog) is on a read-only filesystem. Today: tracebacks
    from simulate, import, ingest and run. Must: every writer says so in one line, nothing changes,
    and `sql` still answers from the catalog."""
    data_dir = tmp_path / "ro"
    with read_only_dir(data_dir) as make_read_only:
        write_square_fleet(data_dir, seconds=1)
        warehouse.publish(data_dir)
        make_read_only()
        before = _tree(data_dir)
        commands = _commands(data_dir, tmp_path)
        for name in ("simulate", "import", "ingest", "run"):
            one_line_error(invoke(*commands[name], "--data-dir", str(data_dir)), str(data_dir), "not writable")
        one_line_error(invoke(*commands["simulate"], "--data-dir", str(data_dir / "new")), "cannot be created", "not writable")
        ok = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(data_dir))
        assert ok.exit_code == 0 and ok.output.splitlines()[0] == '"n"', ok.output
        assert _tree(data_dir) == before


def test_sql_on_a_read_only_data_dir_without_a_catalog(tmp_path):
    """Fault: Parquet on a read-only filesystem, no catalog built yet. Today: an OSError traceback
    (building the catalog). Must: an answer, or one `error:` line; nothing written."""
    data_dir = tmp_path / "ro"
    with read_only_dir(data_dir) as make_read_only:
        write_square_fleet(data_dir, seconds=1)
        make_read_only()
        before = _tree(data_dir)
        result = invoke("sql", "select count(*) as n from power", "--format", "csv", "--data-dir", str(data_dir))
        assert "Traceback" not in result.output and result.exit_code in (0, 2), result.output
        if result.exit_code == 2:
            one_line_error(result, str(data_dir))
        assert _tree(data_dir) == before


# ---- days the pipeline cannot run


@pytest.mark.parametrize("day", ["2031-01-01", "1960-01-01"])
def test_run_of_a_day_outside_the_partitions(tmp_path, day):
    """Today: DagsterUnknownPartitionError with a traceback. Must: one line naming the range."""
    write_square_fleet(tmp_path, seconds=1)
    one_line_error(invoke("run", "--date", day, "--data-dir", str(tmp_path)), day, RANGE)
    assert not (tmp_path / "derived").exists()


def test_run_select_of_an_unknown_asset(tmp_path):
    """Today: '0 assets materialized ... ok', exit 0. Must: exit 2 naming the unknown and the known."""
    write_square_fleet(tmp_path, seconds=1)
    result = invoke("run", "--date", "2026-11-30", "--select", "nosuch,swing_stats", "--data-dir", str(tmp_path))
    one_line_error(result, "unknown asset(s) nosuch; known: ", "swing_stats", "fleet/swing_stats", "power_1s")
    assert not (tmp_path / "derived").exists()


@pytest.mark.parametrize("start, days", [("2031-01-01", 1), ("1960-01-01", 1), (TODAY.isoformat(), 3)])
def test_simulate_outside_the_partitions(tmp_path, monkeypatch, start, days):
    """Today: simulate writes a 2031 (or 1960) day that no run can reach. Must: one line, nothing written.
    (today, 3) at 23:59:59.9 UTC: the last day is past today + the one day of slack."""
    pin(monkeypatch, before_midnight(TODAY))
    data_dir = tmp_path / "d"
    result = invoke("simulate", "--fleet", "tiny", "--hours", "0.01", "--start", start, "--days", str(days), "--data-dir", str(data_dir))
    one_line_error(result, RANGE, f"{FIRST_DAY}..{(TODAY + dt.timedelta(days=1)).isoformat()} (UTC)")
    assert not data_dir.exists() or not any(data_dir.rglob("*.parquet"))


def test_simulate_of_the_slack_day_is_written_once_midnight_has_passed(tmp_path, monkeypatch):
    """The same three days from 00:00:00 UTC the next day: yesterday, today and the day of slack, written."""
    pin(monkeypatch, midnight_after(TODAY))
    data_dir = tmp_path / "d"
    result = invoke("simulate", "--fleet", "tiny", "--hours", "0.01", "--start", TODAY.isoformat(), "--days", "3", "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (data_dir / "power").iterdir()) == [f"date={TODAY + dt.timedelta(days=k)}" for k in range(3)]


def test_simulate_failing_midway_keeps_the_old_inventory(tmp_path, monkeypatch):
    """Fault: the disk fails after some files of a new simulation (another fleet). Today the new
    inventory.yaml is written first, so the next run computes the old data against it. Must: one
    line, and inventory.yaml still the one that describes the data."""
    monkeypatch.setenv("WATTLINE_SIM_WORKERS", "1")  # writers in this process, where the fault is injected
    data_dir = tmp_path / "d"
    first = invoke("simulate", "--fleet", "tiny", "--hours", "0.01", "--start", "2026-11-30", "--data-dir", str(data_dir))
    assert first.exit_code == 0, first.output
    old_inventory = (data_dir / "inventory.yaml").read_bytes()
    other_fleet = tmp_path / "other.yaml"
    other_fleet.write_text(old_inventory.decode().replace("name: tiny", "name: other").replace("tdp_w: 700.0", "tdp_w: 600.0"))

    real_write, calls = writer.write, []

    def failing_write(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 3:  # two GPU files written, then the disk fails
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(writer, "write", failing_write)
    result = invoke("simulate", "--fleet", str(other_fleet), "--hours", "0.01", "--start", "2026-11-30", "--data-dir", str(data_dir))
    one_line_error(result, "No space left on device", "inventory.yaml was left as it was")
    assert len(calls) == 3
    assert (data_dir / "inventory.yaml").read_bytes() == old_inventory
    monkeypatch.setattr(writer, "write", real_write)
    again = invoke("simulate", "--fleet", str(other_fleet), "--hours", "0.01", "--start", "2026-11-30", "--data-dir", str(data_dir))
    assert again.exit_code == 0 and (data_dir / "inventory.yaml").read_text() == other_fleet.read_text()


@pytest.mark.parametrize("instant", [before_midnight(dt.date(2026, 12, 1)), midnight_after(dt.date(2026, 12, 1))],
                         ids=["23:59:59.9", "00:00:00"])
def test_request_rows_outside_the_partitions_are_quarantined_per_line(tmp_path, monkeypatch, instant):
    """Fault: request lines dated 2200, 2019 and 2255 (epoch ns) among good ones, in JSONL and in a
    vLLM bench file. Today: stored under date=2200-... where no run reaches. Must: each such line
    quarantined with the range in its reason, under the day of ingestion (the day its ingested_ts
    is in, also at midnight); the others stored."""
    pin(monkeypatch, instant)
    too_late = (instant.date() + dt.timedelta(days=2)).isoformat()  # past the one day of slack
    log = _jsonl(tmp_path / "mixed.jsonl", [
        _request(1), _request(2, day="2200-01-01"), _request(3), _request(4, day="2019-12-31"),
        dict(_request(5), arrival_ts=9_000_000_000_000_000_000, end_ts=9_000_000_000_000_000_001),
        _request(6, day=too_late), _request(7, day=FIRST_DAY),
    ])
    result = invoke("ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    assert "ingested 3 request(s), quarantined 4" in result.output and "arrival_ts out of range 4" in result.output
    assert _stored_ids(tmp_path / "d") == ["r1", "r3", "r7"]
    q = read_quarantine(tmp_path / "d").to_pylist()
    assert sorted(r["line_no"] for r in q) == [2, 4, 5, 6]
    assert all(RANGE in r["reason"] and r["raw"] == log.read_bytes().split(b"\n")[r["line_no"] - 1] for r in q)
    assert {r["ingested_ts"] for r in q} == {instant}
    assert [p.name for p in (tmp_path / "d" / "quarantine" / "requests").iterdir()] == [f"date={instant.date().isoformat()}"]
    assert sorted(p.name for p in (tmp_path / "d" / "requests").iterdir()) == ["date=2020-01-01", "date=2026-12-01"]


# ---- JSONL nesting and endless inputs


def _deep_line(kb: int = 200) -> bytes:
    n = kb * 1024 // 2
    return b'{"request_id":"deep","endpoint":"e","x":' + b"[" * n + b"]" * n + b"}"


def test_deeply_nested_jsonl_line_is_quarantined_and_its_neighbours_ingested(tmp_path):
    """Fault: a 200 KB line of nested arrays between valid lines. Today: RecursionError, nothing
    ingested. Must: that line quarantined ('nested too deep'), every other line stored; the same
    with a lower --max-depth on a line of depth 3 (the vectorised and per-line paths agree)."""
    lines = [_request(i) for i in range(1, 50)] + [_deep_line()] + [_request(i) for i in range(50, 100)]
    log = _jsonl(tmp_path / "deep.jsonl", lines)
    result = invoke("ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    assert "ingested 99 request(s), quarantined 1" in result.output and "nested too deep (over 64 levels) 1" in result.output
    assert _stored_ids(tmp_path / "d") == sorted(f"r{i}" for i in range(1, 100))
    (q,) = read_quarantine(tmp_path / "d").to_pylist()
    assert q["line_no"] == 50 and q["raw_bytes"] == len(_deep_line())

    nested = _jsonl(tmp_path / "nested.jsonl", [_request(1, meta={"a": [1]}), _request(2)])  # depth 3
    strict = invoke("ingest", "requests", "--allow-unknown-endpoint", str(nested), "--max-depth", "2", "--data-dir", str(tmp_path / "s"))
    assert "ingested 1 request(s), quarantined 1" in strict.output and "nested too deep (over 2 levels) 1" in strict.output
    loose = invoke("ingest", "requests", "--allow-unknown-endpoint", str(nested), "--data-dir", str(tmp_path / "l"))
    assert "ingested 2 request(s), quarantined 0" in loose.output
    brackets_in_strings = _jsonl(tmp_path / "strings.jsonl", [_request(1, note="[" * 500 + "{" * 500)])
    ok = invoke("ingest", "requests", "--allow-unknown-endpoint", str(brackets_in_strings), "--data-dir", str(tmp_path / "b"))
    assert "ingested 1 request(s), quarantined 0" in ok.output, ok.output


def test_follow_survives_a_deeply_nested_line_across_restarts(tmp_path):
    """Fault: the same line in a followed log; the follower is stopped and restarted twice. Today:
    RecursionError at every start. Must: quarantined once, the lines around it stored once."""
    log = _jsonl(tmp_path / "app.jsonl", [_request(1), _deep_line(), _request(2)])
    checkpoint = tmp_path / "cp.json"
    for _ in range(2):
        ingestor = Ingestor(tmp_path / "d", "jsonl")
        Follower([log], ingestor, checkpoint_path=checkpoint, flush_interval_s=0.1, poll_interval_s=0.05).run(threading.Event(), max_s=0.5)
        with log.open("ab") as fh:
            fh.write(json.dumps(_request(3 + _)).encode() + b"\n")
    ingestor = Ingestor(tmp_path / "d", "jsonl")
    Follower([log], ingestor, checkpoint_path=checkpoint, flush_interval_s=0.1, poll_interval_s=0.05).run(threading.Event(), max_s=0.5)
    assert _stored_ids(tmp_path / "d") == ["r1", "r2", "r3", "r4"]
    assert [(r["line_no"], r["reason"]) for r in read_quarantine(tmp_path / "d").to_pylist()] == [(2, "nested too deep (over 64 levels)")]


def _bounded(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """The console script with 2 GiB of address space and a time limit: an endless read fails the test, not the machine."""
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
    return subprocess.run([str(WATTLINE), *args], capture_output=True, text=True, timeout=timeout_s, preexec_fn=limit)


@pytest.mark.parametrize("command", [["ingest", "requests"], ["ingest", "requests", "--follow"], ["import", "nvidia-smi", "--host", "h0", "--tz", "UTC"]])
def test_endless_input_ends_with_one_line(tmp_path, command):
    """Fault: /dev/zero as the input (endless, no newline). Today: `ingest requests` never ends;
    `import nvidia-smi` reads it into memory. Must: one `error:` line at once, bounded memory."""
    r = _bounded(*command, "/dev/zero", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and r.stderr.strip() == "error: not a regular file or folder: /dev/zero (copy the log to a file first)" \
        or r.returncode == 2 and r.stderr.strip() == "error: /dev/zero: not a regular file (copy the log to a file first)", r.stderr
    assert "Traceback" not in r.stderr and not list((tmp_path / "d").rglob("*.parquet"))


# ---- nvidia-smi: encodings, dates, zones


def _power(data_dir: Path) -> list[dict]:
    files = sorted((data_dir / "power").rglob("*.parquet"))
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist() if files else []
    return sorted(rows, key=lambda r: (r["gpu"], r["ts"]))


def _smi_quarantine(data_dir: Path) -> list[dict]:
    files = sorted((data_dir / "quarantine" / "power").glob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files]).sort("line_no").to_dicts() if files else []


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le-bom", "utf-16-be-bom", "utf-16-le"])
def test_nvidia_smi_with_a_bom_or_in_utf16(tmp_path, encoding):
    """Fault: the log as PowerShell writes it (UTF-16 LE with a BOM; `Out-File -Encoding utf8`
    adds a UTF-8 BOM), or BE, or UTF-16 without a BOM. Today: 'not an nvidia-smi CSV header'.
    Must: the same rows as the UTF-8 file, and CRLF line ends taken too."""
    text = SMI.read_text().replace("\n", "\r\n")
    boms = {"utf-16-le-bom": ("\ufeff", "utf-16-le"), "utf-16-be-bom": ("\ufeff", "utf-16-be")}
    prefix, codec = boms.get(encoding, ("", encoding))
    f = tmp_path / "log.csv"
    f.write_bytes((prefix + text).encode(codec))
    ref = invoke("import", "nvidia-smi", str(SMI), "--host", "h0", "--tz", "UTC", "--data-dir", str(tmp_path / "ref"))
    got = invoke("import", "nvidia-smi", str(f), "--host", "h0", "--tz", "UTC", "--data-dir", str(tmp_path / "d"))
    assert ref.exit_code == 0 and got.exit_code == 0, got.output
    assert "quarantined 0 line(s)" in got.output
    assert _power(tmp_path / "d") == _power(tmp_path / "ref") and len(_power(tmp_path / "d")) == 27


def test_nvidia_smi_lines_dated_outside_the_partitions(tmp_path):
    """Fault: lines dated 9999-12-31 23:59 (OverflowError once shifted by the zone), 2300 and
    0001-01-01. Today: the whole file fails. Must: each quarantined with the range, the rest imported."""
    lines = SMI.read_text().splitlines()
    header, body = lines[0], lines[1:]
    odd = [body[0].replace("2026/07/18 15:51:25.606", stamp) for stamp in ("9999/12/31 23:59:59.000", "2300/01/01 00:00:00.000", "0001/01/01 00:00:00.000")]
    f = tmp_path / "log.csv"
    f.write_text("\n".join([header, body[0], *odd, *body[1:]]) + "\n")
    for tz in ("+14:00", "-12:00"):
        result = invoke("import", "nvidia-smi", str(f), "--host", "h0", "--tz", tz, "--data-dir", str(tmp_path / tz))
        assert result.exit_code == 0, result.output
        assert "imported 27 rows" in result.output and "quarantined 3 line(s) (date out of range: 3)" in result.output
        q = _smi_quarantine(tmp_path / tz)
        assert [r["line_no"] for r in q] == [3, 4, 5] and all(RANGE in r["reason"] for r in q)
        assert [r["raw_line"] for r in q] == odd


@pytest.mark.parametrize("tz", ["+99:00", "-13:00", "+05:75", "+14:30"])
def test_nvidia_smi_offset_out_of_range(tmp_path, tz):
    """Today: `--tz +99:00` gives a ValueError traceback. Must: one line naming the valid range."""
    one_line_error(invoke("import", "nvidia-smi", str(SMI), "--host", "h0", "--tz", tz, "--data-dir", str(tmp_path)),
                   tz, "UTC offsets run from -12:00 to +14:00")
    assert not (tmp_path / "power").exists()


def test_nvidia_smi_binary_file_is_one_line(tmp_path):
    """Fault: a binary file (bytes that are not text) given as an nvidia-smi log. Today: 'empty
    file (no header)', which is false. Must: one line saying it is not text."""
    f = tmp_path / "binary.csv"
    f.write_bytes(bytes(range(128, 256)) * 4 + b"\n" + bytes(range(128, 256)) * 80)
    one_line_error(invoke("import", "nvidia-smi", str(f), "--host", "h0", "--tz", "UTC", "--data-dir", str(tmp_path / "d")),
                   "not an nvidia-smi CSV log", "not UTF-8")
