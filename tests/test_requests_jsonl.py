"""The canonical JSONL request log: timestamp rules, validation, quarantine, dedup, CLI exit codes."""

from __future__ import annotations

import datetime as dt
import io
import json
import resource

import polars as pl
import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

from collectors.requests.ingestor import Ingestor
from collectors.requests.jsonl import parse_lines
from collectors.requests.lines import LineReader
from collectors.requests.quarantine import read_quarantine
from collectors.requests.timestamps import BadTimestamp, epoch_to_ns, rfc3339_to_ns, to_ns
from pipeline.cli import main

T0 = dt.datetime(2026, 12, 2, 13, 5, tzinfo=dt.UTC)
T0_S = int(T0.timestamp())


def rec(i: int, **over) -> dict:
    r = {
        "request_id": f"r{i}",
        "endpoint": "chat",
        "arrival_ts": T0_S + i,
        "end_ts": T0_S + i + 2,
        "prompt_tokens": 100 + i,
        "output_tokens": 10,
    }
    r.update(over)
    return {k: v for k, v in r.items() if v is not ...}


def jl(*records) -> bytes:
    return b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in records)


def stored(data_dir) -> pl.DataFrame:
    files = sorted((data_dir / "requests").glob("date=*/*.parquet"))
    if not files:
        return pl.DataFrame()
    return pl.from_arrow(pads.dataset(files, format="parquet").to_table()).sort("request_id")


def ingest(tmp_path, content: bytes, name="log.jsonl", **kw):
    path = tmp_path / name
    path.write_bytes(content)
    ing = Ingestor(tmp_path / "data", "jsonl", progress=False, **kw)
    return ing.ingest([path]), tmp_path / "data"


# ---- timestamps


@pytest.mark.parametrize(
    "value, expected_ns",
    [
        (1_796_216_700, 1_796_216_700 * 10**9),  # seconds
        (1_796_216_700.25, 1_796_216_700_250_000_000),  # fractional seconds
        (1_796_216_700_123, 1_796_216_700_123_000_000),  # ms
        (1_796_216_700_123_456, 1_796_216_700_123_456_000),  # µs
        (1_796_216_700_123_456_789, 1_796_216_700_123_456_789),  # ns, exact
        ("2026-12-02T13:05:00Z", 1_796_216_700 * 10**9),
        ("2026-12-02 15:05:00.5+02:00", 1_796_216_700_500_000_000),
        ("2026-12-02T13:05:00.123456789123z", 1_796_216_700_123_456_789),  # >9 digits cut
    ],
)
def test_timestamp_forms(value, expected_ns):
    assert to_ns(value) == expected_ns
    assert int(T0.timestamp()) * 10**9 == 1_796_216_700 * 10**9


@pytest.mark.parametrize("value", ["2026-12-02T13:05:00", "2026-13-02T00:00:00Z", "yesterday", -5, float("nan"), True, 1e30])
def test_bad_timestamps(value):
    with pytest.raises(BadTimestamp):
        to_ns(value)


def test_epoch_magnitude_boundaries():
    assert epoch_to_ns(9_000_000_000) == 9_000_000_000 * 10**9  # seconds (year 2255)
    with pytest.raises(BadTimestamp, match="2262"):
        epoch_to_ns(99_999_999_999)  # still seconds by magnitude, but past int64 ns
    assert epoch_to_ns(100_000_000_000) == 100_000_000_000 * 10**6  # ms from 1e11
    assert epoch_to_ns(10**14) == 10**14 * 1000  # µs from 1e14
    assert epoch_to_ns(10**17) == 10**17  # ns from 1e17
    assert rfc3339_to_ns("1970-01-01T00:00:01-00:00") == 10**9


# ---- the vectorised path and the per-line path agree


def test_fast_and_per_line_paths_agree():
    records = [
        rec(0),
        rec(1, arrival_ts="2026-12-02T13:05:01.5Z", first_token_ts=(T0_S + 2) * 1000, end_ts=(T0_S + 3) * 10**9),
        rec(2, arrival_ts=T0_S + 2.123456, prefill_start_ts=T0_S + 2.2, status="error"),
        rec(3, endpoint=None),  # endpoint from the default
        rec(4, status="cancelled", arrival_ts="2026-12-02 13:05:04+00:00"),
    ]
    lines = list(LineReader(io.BytesIO(jl(*records))).read(final=True))
    fast, rejects = parse_lines(lines, "f", "dflt")
    assert not rejects
    # a broken line in the chunk sends every line through the per-line path
    slow, rejects = parse_lines(lines + list(LineReader(io.BytesIO(b"{oops\n"), 0, 6).read()), "f", "dflt")
    assert [r.reason.split(":")[0] for r in rejects] == ["invalid JSON"]
    assert fast.equals(slow)
    assert fast["endpoint"].to_list() == ["chat", "chat", "chat", "dflt", "chat"]
    row = fast.row(1, named=True)
    assert row["arrival_ts"] == T0_S * 10**9 + 1_500_000_000
    assert row["first_token_ts"] == (T0_S + 2) * 10**9


# ---- every bad-input class: quarantined with a reason, good lines kept


def test_each_bad_input_class_is_quarantined_with_its_reason(tmp_path):
    good = [rec(i) for i in range(5)]
    bad = [
        b"{not json\n",
        jl(rec(10, request_id=...)),  # missing field
        jl(rec(11, end_ts=...)),
        jl(rec(12, prompt_tokens="12")),  # wrong type
        jl(rec(13, output_tokens=1.5)),
        jl(rec(14, request_id=14)),
        jl(rec(15, prompt_tokens=-1)),  # negative tokens
        jl(rec(16, arrival_ts=-3)),  # negative timestamp
        jl(rec(17, end_ts=T0_S)),  # end before arrival (arrival is T0+17)
        jl(rec(18, first_token_ts=T0_S)),  # reversed: first token before arrival
        jl(rec(19, status="done")),
        jl(rec(20, arrival_ts="2026-12-02T13:05:00")),  # no UTC offset
        b'{"request_id": "r21", "endpoint": "caf\xe9"}\n',  # Latin-1, not UTF-8
        b"[1, 2, 3]\n",
        jl(rec(22))[:-30],  # truncated last line, no newline
    ]
    summary, data = ingest(tmp_path, jl(*good[:3]) + b"".join(bad[:-1]) + jl(*good[3:]) + bad[-1])
    assert (summary.ingested, summary.quarantined, summary.duplicates) == (5, len(bad), 0)
    assert stored(data)["request_id"].to_list() == [f"r{i}" for i in range(5)]
    q = pl.from_arrow(read_quarantine(data)).sort("line_no")
    reasons = dict(zip(q["line_no"], q["reason"], strict=False))
    expected = [
        "invalid JSON",
        "missing field request_id",
        "missing field end_ts",
        "prompt_tokens must be an integer, got str",
        "output_tokens must be an integer, got float",
        "request_id must be a non-empty string, got int",
        "prompt_tokens is negative",
        "arrival_ts: negative epoch value",
        "end_ts before arrival_ts",
        "first_token_ts before arrival_ts",
        "status must be one of",
        "arrival_ts: not an RFC 3339 timestamp",
        "invalid UTF-8 at byte",
        "not a JSON object (list)",
        "truncated last line (no newline at end of file)",
    ]
    got = [reasons[n] for n in range(4, 4 + len(bad) - 1)] + [reasons[4 + len(bad) - 1 + 2]]
    for reason, prefix in zip(got, expected, strict=True):
        assert reason.startswith(prefix), (reason, prefix)
    # raw bytes kept exactly, whatever the encoding; the file and line are named
    latin = q.filter(pl.col("reason").str.starts_with("invalid UTF-8")).row(0, named=True)
    assert latin["raw"] == bad[12].rstrip(b"\n") and latin["source_file"].endswith("log.jsonl")
    # a rejected line is filed under its arrival day when that is readable
    assert {p.name for p in (data / "quarantine" / "requests").iterdir()} >= {"date=2026-12-02"}


def test_duplicates_identical_are_counted_conflicting_are_quarantined(tmp_path):
    content = jl(rec(1), rec(2), rec(1), rec(2, output_tokens=99), rec(3))
    summary, data = ingest(tmp_path, content)
    assert (summary.ingested, summary.duplicates, summary.quarantined) == (3, 1, 1)
    q = pl.from_arrow(read_quarantine(data))
    assert q["line_no"].to_list() == [4] and q["reason"][0].startswith("duplicate (request_id, endpoint)")
    # the same id on another endpoint is another request
    summary, _ = ingest(tmp_path, jl(rec(1, endpoint="other")), name="b.jsonl")
    assert summary.ingested == 1


def test_reingesting_the_same_file_adds_nothing(tmp_path):
    content = jl(*(rec(i) for i in range(50))) + b"garbage\n"
    first, data = ingest(tmp_path, content)
    files = sorted((data).rglob("*.parquet"))
    again, _ = ingest(tmp_path, content)
    assert (first.ingested, first.quarantined) == (50, 1)
    assert (again.ingested, again.quarantined, again.duplicates) == (0, 0, 50)
    assert sorted(data.rglob("*.parquet")) == files
    # a stored row changed in a later copy of the log is a conflict, not a silent overwrite
    changed, _ = ingest(tmp_path, jl(rec(7, output_tokens=11)), name="later.jsonl")
    assert (changed.ingested, changed.quarantined) == (0, 1)
    assert stored(data).filter(pl.col("request_id") == "r7")["output_tokens"].to_list() == [10]


def test_stored_rows_follow_the_contract(tmp_path):
    _, data = ingest(tmp_path, jl(rec(0, first_token_ts="2026-12-02T13:05:00.75Z")))
    from collectors.contract import REQUESTS, check_file_schema

    (path,) = (data / "requests" / "date=2026-12-02").glob("*.parquet")
    check_file_schema(path, REQUESTS)
    row = stored(data).row(0, named=True)
    assert row["arrival_ts"] == T0 and row["first_token_ts"] == T0 + dt.timedelta(milliseconds=750)
    assert row["status"] == "ok" and row["prefill_start_ts"] is None


# ---- long lines


def test_line_over_the_limit_is_quarantined_with_a_prefix(tmp_path):
    long = b'{"request_id": "' + b"x" * 200_000 + b'"}\n'
    summary, data = ingest(tmp_path, jl(rec(0)) + long + jl(rec(1)), max_line_bytes=64 * 1024)
    assert (summary.ingested, summary.quarantined) == (2, 1)
    q = read_quarantine(data).to_pylist()[0]
    assert q["reason"] == "line too long" and q["line_no"] == 2
    assert q["raw_bytes"] == len(long) - 1 and q["raw"] == long[:4096]


def test_one_gigabyte_line_does_not_load_into_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:  # sparse: 1 GiB on paper, nothing on disk
        fh.write(jl(rec(0)) + b'{"request_id": "')
        fh.truncate(fh.tell() + (1 << 30))
        fh.seek(0, 2)
        fh.write(b'"}\n' + jl(rec(1)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ing = Ingestor(tmp_path / "data", "jsonl", progress=False)
    summary = ing.ingest([path])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert (summary.ingested, summary.quarantined) == (2, 1)
    (q,) = read_quarantine(tmp_path / "data").to_pylist()
    assert q["reason"] == "line too long" and q["raw_bytes"] > 1 << 30 and len(q["raw"]) == 4096
    assert grown_mib < 200


# ---- CLI


def test_cli_summary_and_exit_codes(tmp_path):
    runner = CliRunner()
    log = tmp_path / "a.jsonl"
    log.write_bytes(jl(rec(0), rec(1)) + b"bad\n")
    result = runner.invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(log), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "ingested 2 request(s), quarantined 1, duplicates 0" in result.output
    # all lines bad: the file was still read, so success
    only_bad = tmp_path / "b.jsonl"
    only_bad.write_bytes(b"bad\n")
    result = runner.invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(only_bad), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 0 and "quarantined 1" in result.output
    # nothing readable at all: exit 2 with one line
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    result = runner.invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(empty_dir), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 2 and "nothing could be read" in result.output
    result = runner.invoke(main, ["ingest", "requests", "--allow-unknown-endpoint", str(tmp_path / "nope.jsonl"), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 2 and "no such file" in result.output
    result = runner.invoke(main, ["ingest", "requests", "--format", "azure", "--follow", str(log)])
    assert result.exit_code == 2 and "--follow works with --format jsonl only" in result.output


def test_long_lines_amid_a_bulk_file_keep_their_neighbours_in_blocks(tmp_path):
    from collectors.requests.lines import Block, Line, iter_blocks

    data = jl(rec(0), rec(1)) + b"x" * 5000 + b"\n" + jl(rec(2)) + b"y" * 3000 + b"\n" + jl(rec(3))[:-1]
    items = list(iter_blocks(io.BytesIO(data), block_bytes=1 << 16, max_line_bytes=2048))
    assert [(type(i).__name__, getattr(i, "first_line", getattr(i, "number", None))) for i in items] == [
        ("Block", 1), ("Line", 3), ("Block", 4), ("Line", 5), ("Block", 6)
    ]
    assert isinstance(items[1], Line) and items[1].too_long and items[1].length == 5000
    assert isinstance(items[-1], Block) and items[-1].end == len(data)
    summary, data_dir = ingest(tmp_path, data, max_line_bytes=2048)
    assert (summary.ingested, summary.quarantined) == (4, 2)
    assert sorted(read_quarantine(data_dir).column("line_no").to_pylist()) == [3, 5]


def test_a_field_first_seen_late_in_a_chunk_is_not_dropped(tmp_path):
    # polars infers columns from the first rows only; a later first_token_ts must still be read and checked
    records = [rec(i) for i in range(1500)]
    records.append(rec(1500, first_token_ts=T0_S + 1501))
    records.append(rec(1501, first_token_ts=T0_S))  # before its arrival: must be caught
    summary, data = ingest(tmp_path, jl(*records))
    assert (summary.ingested, summary.quarantined) == (1501, 1)
    row = stored(data).filter(pl.col("request_id") == "r1500").row(0, named=True)
    assert row["first_token_ts"] == T0 + dt.timedelta(seconds=1501)


def test_two_writers_on_one_data_dir_do_not_duplicate(tmp_path):
    # a follower and a bulk import of the same log, interleaved: each sees the other's files
    log = tmp_path / "a.jsonl"
    log.write_bytes(jl(*(rec(i) for i in range(10))))
    one = Ingestor(tmp_path / "data", "jsonl", progress=False)
    two = Ingestor(tmp_path / "data", "jsonl", progress=False)
    one.ingest([log])
    two.ingest([log])
    log.write_bytes(jl(*(rec(i) for i in range(15))))
    one.ingest([log])
    assert (one.summary.ingested, two.summary.ingested, one.summary.duplicates, two.summary.duplicates) == (15, 0, 10, 10)
    assert stored(tmp_path / "data")["request_id"].n_unique() == stored(tmp_path / "data").height == 15
