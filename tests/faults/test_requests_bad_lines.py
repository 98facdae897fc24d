"""Item 4: one request log with every bad-line class at once, through the bulk CLI and through --follow.

Each class alone is tested in ``tests/test_requests_jsonl.py``; here they share one file (as a broken
gateway would produce), so a bad line cannot hide a good neighbour: every valid line must be stored
with its values, every bad one quarantined under its own line number with its own reason, and the
counts must be exact.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import polars as pl
from click.testing import CliRunner

from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine, reason_counts, reason_kind
from collectors.requests.tail import Follower
from pipeline.cli import main
from tests.test_requests_jsonl import T0, T0_S, jl, rec, stored

GIB = 1 << 30


def mixed_log(path) -> tuple[list[int], dict[int, str], int]:
    """Write the file; returns (valid record ids, {line_no: expected reason prefix}, identical repeats)."""
    bad = [
        (b"{not json\n", "invalid JSON"),
        (jl(rec(9001, request_id=...)), "missing field request_id"),
        (jl(rec(9002, end_ts=...)), "missing field end_ts"),
        (jl(rec(9003, prompt_tokens="12")), "prompt_tokens must be an integer, got str"),
        (jl(rec(9004, request_id=14)), "request_id must be a non-empty string, got int"),
        (jl(rec(9005, arrival_ts="yesterday")), "arrival_ts: not an RFC 3339 timestamp"),
        (jl(rec(9006, arrival_ts=-3)), "arrival_ts: negative epoch value"),
        (jl(rec(9007, first_token_ts=T0_S)), "first_token_ts before arrival_ts"),  # reversed
        (jl(rec(9008, end_ts=T0_S)), "end_ts before arrival_ts"),
        (b'{"request_id": "r9009", "endpoint": "caf\xe9"}\n', "invalid UTF-8 at byte"),
        (jl(rec(5, output_tokens=99)), "duplicate (request_id, endpoint) with different content"),
        (None, "line too long"),  # the 1 GiB line
    ]
    valid, reasons, repeats = [], {}, 0
    line_no = 0
    with open(path, "wb") as fh:
        def put(data: bytes) -> None:
            nonlocal line_no
            fh.write(data)
            line_no += 1

        for i in range(300):
            put(jl(rec(i, first_token_ts=T0_S + i + 1) if i % 3 == 0 else rec(i)))
            valid.append(i)
            if i % 25 == 10 and bad:
                data, reason = bad.pop(0)
                if data is None:  # sparse: 1 GiB on paper, nothing on disk
                    fh.write(b'{"request_id": "huge", "pad": "')
                    fh.truncate(fh.tell() + GIB)
                    fh.seek(0, os.SEEK_END)
                    data = b'"}\n'
                put(data)
                reasons[line_no] = reason
            if i == 100:
                put(jl(rec(7)))  # an identical repeat: counted as a duplicate, not quarantined
                repeats += 1
        put(b"\n")  # a blank line carries no record: neither kept nor quarantined
        put(jl(rec(300))[:-25])  # the writer died mid-line: no newline at the end
        reasons[line_no] = "truncated last line (no newline at end of file)"
    assert not bad
    return valid, reasons, repeats


def check(data_dir, valid, reasons) -> None:
    rows = stored(data_dir)
    assert rows["request_id"].to_list() == sorted(f"r{i}" for i in valid)  # every valid line, once
    by_id = {r["request_id"]: r for r in rows.iter_rows(named=True)}
    for i in valid:
        r = by_id[f"r{i}"]
        assert r["arrival_ts"] == T0 + dt.timedelta(seconds=i) and r["prompt_tokens"] == 100 + i
        assert r["first_token_ts"] == (T0 + dt.timedelta(seconds=i + 1) if i % 3 == 0 else None)
    q = pl.from_arrow(read_quarantine(data_dir))
    got = dict(zip(q["line_no"].to_list(), q["reason"].to_list(), strict=False))
    assert sorted(got) == sorted(reasons)  # each bad line once, under its own line number
    for line_no, prefix in reasons.items():
        assert got[line_no].startswith(prefix), (line_no, got[line_no], prefix)
    huge = q.filter(pl.col("reason") == "line too long").row(0, named=True)
    assert huge["raw_bytes"] > GIB and len(huge["raw"]) == 4096  # a prefix kept, the size told
    latin = q.filter(pl.col("reason").str.starts_with("invalid UTF-8")).row(0, named=True)
    assert latin["raw"] == b'{"request_id": "r9009", "endpoint": "caf\xe9"}'  # bytes kept as read
    assert sum(reason_counts(read_quarantine(data_dir)).values()) == len(reasons)


def test_every_bad_class_in_one_file_through_the_cli(tmp_path):
    log = tmp_path / "gateway.jsonl"
    valid, reasons, repeats = mixed_log(log)
    data = tmp_path / "data"
    r = CliRunner().invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    assert (f"ingested {len(valid)} request(s), quarantined {len(reasons)}, duplicates {repeats} (from 1 file(s))"
            in r.output), r.output
    check(data, valid, reasons)
    # per reason too, matching the quarantine table
    kinds = Counter(reason_kind(r) for r in read_quarantine(data).column("reason").to_pylist())
    assert len(kinds) == len(reasons) and set(kinds.values()) == {1}
    by_count = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    assert r.output.strip().endswith("; quarantine reasons: " + ", ".join(f"{k} {n}" for k, n in by_count))
    assert "quarantine reasons: arrival_ts: negative epoch value 1," in r.output and "line too long 1" in r.output
    # the same command again adds nothing: every line is a known duplicate or a known quarantine entry
    r = CliRunner().invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data)])
    assert f"ingested 0 request(s), quarantined 0, duplicates {len(valid) + repeats}" in r.output, r.output
    check(data, valid, reasons)


def test_every_bad_class_in_one_file_while_following_then_rotated(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "gateway.jsonl"
    valid, reasons, repeats = mixed_log(log)
    data = tmp_path / "data"
    f = Follower([log], Ingestor(data, "jsonl", progress=False), close_after_s=0.0)
    for _ in range(GIB // (64 << 20) + 4):  # 64 MiB per poll: read through the 1 GiB line
        f.poll()
        f.flush()
    # the unterminated last line waits for its newline while the file is live...
    assert f.ingestor.summary.quarantined == len(reasons) - 1
    # ...and is judged once logrotate renames the file away and it stops growing
    os.rename(log, logs / "gateway.jsonl.1")
    log.write_bytes(jl(rec(400)))
    for _ in range(2):
        f.poll()
        f.flush()
    s = f.ingestor.summary
    assert (s.ingested, s.quarantined, s.duplicates) == (len(valid) + 1, len(reasons), repeats)
    check(data, valid + [400], reasons)


def test_counts_are_where_an_operator_looks(tmp_path):
    """There is no Dagster asset that ingests requests (ingestion is `wattline ingest requests`; the
    `requests` raw asset only observes files): the counts are the CLI's summary line (per reason
    kind) and the quarantine table (per exact reason)."""
    log = tmp_path / "gateway.jsonl"
    log.write_bytes(jl(rec(0), rec(1)) + b"{oops\n" + jl(rec(2, prompt_tokens=-1)) + b"\xff\xfe\n")
    data = tmp_path / "data"
    r = CliRunner().invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(data)])
    assert r.output.strip() == ("ingested 2 request(s), quarantined 3, duplicates 0 (from 1 file(s)); "
                                "quarantine reasons: invalid JSON 1, invalid UTF-8 1, prompt_tokens is negative 1")
    counts = reason_counts(read_quarantine(data))
    assert counts == {
        "invalid JSON: Expecting property name enclosed in double quotes at column 2": 1,
        "prompt_tokens is negative": 1,
        "invalid UTF-8 at byte 0": 1,
    }
