"""Importers for real traces: Azure LLM inference (2023 files, 2024 precision) and vLLM bench results.

Expected values are computed here from the raw files with the standard library, independently
of the importers' polars code.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import json
import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

from collectors.requests.azure import azure_arrivals
from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from pipeline.cli import main

DATA = Path(__file__).parent / "data"
CODE_SLICE = DATA / "azure" / "code_slice.csv"
VLLM_RUNS = sorted((DATA / "vllm").glob("run-*/requests.json"))
UTC = dt.UTC


def stored(data_dir: Path) -> pl.DataFrame:
    files = sorted((data_dir / "requests").glob("date=*/*.parquet"))
    return pl.from_arrow(pads.dataset(files, format="parquet").to_table())


def azure_rows(path: Path) -> list[tuple[int, int, int]]:
    """(arrival ns, prompt, output) per row, by hand: csv + datetime, 7 fractional digits kept."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            whole, frac = row["TIMESTAMP"].split(".")
            secs = int(dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
            out.append((secs * 10**9 + int(frac.ljust(9, "0")), int(row["ContextTokens"]), int(row["GeneratedTokens"])))
    return out


def ns(ts: dt.datetime) -> int:
    return int(ts.timestamp()) * 10**9 + ts.microsecond * 1000


# ---- Azure


def test_azure_slice_rows_and_timestamps(tmp_path):
    summary = Ingestor(tmp_path, "azure", endpoint="code", progress=False).ingest([CODE_SLICE])
    expected = azure_rows(CODE_SLICE)
    assert len(expected) == 301 and summary.ingested == 301 and summary.quarantined == 0
    df = stored(tmp_path).with_columns(pl.col("arrival_ts").dt.epoch("ns").alias("ns")).sort("ns")
    assert df["ns"].to_list() == sorted(e[0] for e in expected)
    # the first row by hand: 2023-11-16 18:17:03.9799600 UTC, 4808 prompt, 10 output
    first = df.row(0, named=True)
    assert first["ns"] == ns(dt.datetime(2023, 11, 16, 18, 17, 3, 979960, tzinfo=UTC))
    assert (first["prompt_tokens"], first["output_tokens"], first["endpoint"]) == (4808, 10, "code")
    assert first["request_id"] == f"az-{first['ns']}-4808-10"
    # the last row has no trailing newline in the file and is still there
    assert df.row(-1, named=True)["ns"] == ns(dt.datetime(2023, 11, 16, 19, 14, 19, 928016, tzinfo=UTC))
    # arrival-only: no timing, no status
    assert df.select(pl.col("first_token_ts", "end_ts", "prefill_start_ts", "status").null_count()).row(0) == (301,) * 4


def test_azure_conv_full_trace_under_5s(tmp_path):
    trace = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    with gzip.open(DATA / "azure" / "AzureLLMInferenceTrace_conv.csv.gz") as src, open(trace, "wb") as dst:
        shutil.copyfileobj(src, dst)
    started = time.perf_counter()
    summary = Ingestor(tmp_path / "d", "azure", endpoint="AzureLLMInferenceTrace_conv", progress=False).ingest([trace])
    elapsed = time.perf_counter() - started
    assert (summary.ingested, summary.quarantined) == (19_366, 0)
    assert elapsed < 5.0, f"{elapsed:.2f} s"
    df = stored(tmp_path / "d")
    assert df["endpoint"].unique().to_list() == ["AzureLLMInferenceTrace_conv"]
    assert df["request_id"].n_unique() == 19_366
    expected = azure_rows(trace)
    assert int(df["prompt_tokens"].sum()) == sum(e[1] for e in expected)
    assert int(df["output_tokens"].max()) == max(e[2] for e in expected) == 1000
    # idempotent by content: a second copy under another name adds nothing
    copy = tmp_path / "copy.csv"
    shutil.copy(trace, copy)
    again = Ingestor(tmp_path / "d", "azure", endpoint="AzureLLMInferenceTrace_conv", progress=False).ingest([copy])
    assert (again.ingested, again.duplicates) == (0, 19_366)


def test_azure_2024_mixed_precision_and_bad_rows(tmp_path):
    # The 2024 week-long files' shape: fewer or no fractional digits on some rows, no newline at the end.
    trace = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    trace.write_bytes(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2024-05-10 00:00:00.009930+00:00,1020,129\n"  # with an explicit offset, as some releases write it
        b"2024-05-10 00:00:00,30,5\n"
        b"2024-05-10 00:00:01.5,30,5\n"
        b"2024-05-10 00:00:01.5,30,5\n"  # an identical second request: kept, numbered
        b"2024-05-10 00:00:02.1234567,-4,5\n"
        b"not a time,30,5\n"
        b"2024-05-10 00:00:03.25,30\n"
        b"2024-05-10 00:00:04.0000001,7,x\n"
        b"2024-05-10 00:00:05.75,8,9"
    )
    summary = Ingestor(tmp_path / "d", "azure", endpoint="conv", progress=False).ingest([trace])
    assert (summary.ingested, summary.quarantined) == (5, 4)
    df = stored(tmp_path / "d").sort("arrival_ts")
    day = ns(dt.datetime(2024, 5, 10, tzinfo=UTC))
    assert sorted(df["arrival_ts"].dt.epoch("ns").to_list()) == sorted(
        [day + 9_930_000, day, day + 1_500_000_000, day + 1_500_000_000, day + 5_750_000_000]
    )
    assert {f"az-{day + 1_500_000_000}-30-5", f"az-{day + 1_500_000_000}-30-5-1"} <= set(df["request_id"])
    q = pl.from_arrow(read_quarantine(tmp_path / "d")).sort("line_no")
    assert list(zip(q["line_no"], q["reason"], strict=False)) == [
        (6, "ContextTokens is negative"),
        (7, "TIMESTAMP: not a timestamp"),
        (8, "expected 3 fields, got 2"),
        (9, "GeneratedTokens: not an integer"),
    ]
    assert q.filter(pl.col("line_no") == 7)["raw"].to_list() == [b"not a time,30,5"]


def test_azure_arrivals_for_the_simulator():
    arrivals = azure_arrivals(CODE_SLICE)
    expected = sorted(azure_rows(CODE_SLICE))
    assert len(arrivals.offset_s) == len(expected) == 301
    assert arrivals.offset_s[0] == 0.0 and np.all(np.diff(arrivals.offset_s) >= 0)
    assert arrivals.offset_s[1] == pytest.approx((expected[1][0] - expected[0][0]) / 1e9)
    assert arrivals.offset_s[-1] == pytest.approx((expected[-1][0] - expected[0][0]) / 1e9)
    assert arrivals.prompt_tokens.tolist() == [e[1] for e in expected]
    assert arrivals.output_tokens.tolist() == [e[2] for e in expected]
    midnight = azure_arrivals(CODE_SLICE, origin="midnight")
    assert midnight.offset_s[0] == pytest.approx(18 * 3600 + 17 * 60 + 3.97996)


def test_replay_hook_splits_a_trace_over_endpoints():
    from collectors.requests.replay import load_replay_arrivals

    per_endpoint = load_replay_arrivals("azure", CODE_SLICE, ["a", "b", "c"])
    assert sum(len(a.offset_s) for a in per_endpoint.values()) == 301
    assert per_endpoint["a"].offset_s[0] == 0.0 and len(per_endpoint["a"].offset_s) == 101
    merged = np.sort(np.concatenate([a.offset_s for a in per_endpoint.values()]))
    assert merged.tolist() == azure_arrivals(CODE_SLICE).offset_s.tolist()


# ---- vLLM bench results


@pytest.mark.parametrize("path", VLLM_RUNS, ids=lambda p: p.parent.name)
def test_vllm_bench_real_runs(tmp_path, path):
    raw = json.loads(path.read_text())
    summary = Ingestor(tmp_path, "vllm-bench", endpoint="qwen3-8b", progress=False).ingest([path])
    assert (summary.ingested, summary.quarantined) == (4, 0)
    df = stored(tmp_path).sort("arrival_ts")
    for i in (0, 2):  # by hand: first token = start + ttft; end = first + itl × (output − 1)
        start, ttft, itl, out = raw["request_timestamps"][i], raw["ttfts"][i], raw["itls"][i], raw["output_lens"][i]
        row = df.row(i, named=True)
        assert row["arrival_ts"].timestamp() == pytest.approx(start, abs=1e-6)
        assert row["first_token_ts"].timestamp() == pytest.approx(start + ttft, abs=1e-6)
        assert row["end_ts"].timestamp() == pytest.approx(start + ttft + itl * (out - 1), abs=1e-6)
        assert (row["prompt_tokens"], row["output_tokens"], row["status"]) == (raw["input_lens"][i], out, "ok")
    # run-1784415083's third request: 281 tokens at ~12.7 ms → ~3.6 s of decode
    assert (df["end_ts"] - df["first_token_ts"]).dt.total_seconds().max() < 4


def test_vllm_bench_itl_lists_errors_and_bad_entries(tmp_path):
    raw = json.loads(VLLM_RUNS[0].read_text())
    raw["itls"] = [[0.01, 0.02, 0.03], [0.5], [], 0.0125]  # per-token lists (other vLLM versions) and a mean
    raw["errors"] = ["", "", "", ""]
    raw["output_lens"] = [4, 2, 0, 41]
    raw["ttfts"][2] = 0.0
    raw["errors"][2] = "timeout"
    raw["input_lens"].append(10)  # a fifth entry with nothing else: quarantined, not guessed
    path = tmp_path / "result.json"
    path.write_text(json.dumps(raw))
    summary = Ingestor(tmp_path / "d", "vllm-bench", endpoint="vllm-bench", progress=False).ingest([path])
    assert (summary.ingested, summary.quarantined) == (4, 1)
    df = stored(tmp_path / "d").sort("arrival_ts")
    start0 = raw["request_timestamps"][0]
    assert df["end_ts"][0].timestamp() == pytest.approx(start0 + raw["ttfts"][0] + 0.06, abs=1e-6)
    assert df["status"].to_list() == ["ok", "ok", "error", "ok"]
    assert df["first_token_ts"][2] is None and df["end_ts"][2] is None
    assert df["endpoint"].unique().to_list() == ["vllm-bench"]
    (q,) = read_quarantine(tmp_path / "d").to_pylist()
    assert q["line_no"] == 5 and "no entry 5" in q["reason"]


def test_vllm_bench_without_start_times_is_a_clear_error(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"input_lens": [1], "output_lens": [1], "ttfts": [0.1], "itls": [0.01]}))
    result = CliRunner().invoke(main, ["ingest", "requests", "--format", "vllm-bench", "--allow-unknown-endpoint", str(path),
                                         "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert "missing per-request array(s): request_timestamps or start_times" in result.output


def test_azure_non_utf8_row_and_wrong_header_via_cli(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.5,10,\xff\n2024-05-10 00:00:01,10,2\n")
    not_azure = tmp_path / "other.csv"
    not_azure.write_bytes(b"time,prompt,output\n1,2,3\n")
    runner = CliRunner()
    args = ["ingest", "requests", "--format", "azure", "--endpoint", "conv", "--allow-unknown-endpoint",
            "--data-dir", str(tmp_path / "d")]
    result = runner.invoke(main, [*args, str(trace), str(not_azure)])
    assert result.exit_code == 0, result.output
    assert "ingested 1 request(s), quarantined 1, duplicates 0 (from 1 file(s); 1 unreadable)" in result.output
    assert "other.csv: expected the header TIMESTAMP,ContextTokens,GeneratedTokens" in result.output
    (q,) = read_quarantine(tmp_path / "d").to_pylist()
    assert q["reason"].startswith("invalid UTF-8") and q["raw"] == b"2024-05-10 00:00:00.5,10,\xff"
    result = runner.invoke(main, [*args, str(not_azure)])
    assert result.exit_code == 2 and "nothing could be read" in result.output


def test_progress_bar_only_on_a_terminal():
    from collectors.requests.progress import byte_progress

    with byte_progress(100, "x") as advance:  # pytest's stderr is not a TTY: a no-op
        advance(50)
    with byte_progress(100, "x", enabled=True) as advance:
        advance(100)
