"""``max_tokens`` (the requested output length) through every importer that has it, null where the
source does not say, and request files written before the column existed read as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collectors.contract import ADDED_COLUMNS, REQUESTS, inspect_file
from collectors.requests.ingestor import Ingestor
from collectors.requests.quarantine import read_quarantine
from pipeline.file_quarantine import usable_files
from pipeline.warehouse import compute_connection
from tests.otlp_sender import emit, fake_request, otlp_json
from tests.phase_fixtures import endpoint_inventory
from tests.test_requests_jsonl import ingest, jl, rec, stored

VLLM_RUN = Path(__file__).parent / "data" / "vllm" / "run-1784415083" / "requests.json"


def by_id(data: Path) -> dict[str, int | None]:
    df = stored(data)
    return dict(zip(df["request_id"].to_list(), df["max_tokens"].to_list(), strict=True))


@pytest.mark.parametrize("lines", [2, 1500], ids=["per-line", "vectorised"])
def test_jsonl_fills_max_tokens_and_leaves_it_null_when_absent(tmp_path, lines):
    """Both paths of the JSONL parser: polars' batch (1500 lines) and the per-line checks (a bad line)."""
    recs = [rec(i, max_tokens=(64 * (i % 3) if i % 2 else None)) for i in range(lines)]
    bad = {-1: "max_tokens is negative", 2**31: "max_tokens exceeds int32"}
    if lines == 2:  # a float would send polars' whole batch to the per-line path
        bad[1.5] = "max_tokens must be an integer, got float"
    recs += [rec(lines + k, max_tokens=v) for k, v in enumerate(bad)]
    summary, data = ingest(tmp_path, jl(*recs) + (b"" if lines > 2 else b"{bad\n"))
    assert summary.ingested == lines
    got = by_id(data)
    for i in range(lines):
        assert got[f"r{i}"] == (64 * (i % 3) if i % 2 else None)
    reasons = sorted(q["reason"] for q in read_quarantine(data).to_pylist() if lines < q["line_no"] <= lines + len(bad))
    assert reasons == sorted(bad.values())


def test_otlp_span_from_the_sdk_carries_max_tokens(tmp_path):
    """vLLM's ``gen_ai.request.max_tokens`` on a span made by the official SDK; a span without it: null."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm-a"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("vllm.llm_engine")
    emit(tracer, fake_request(0))  # the sender sets gen_ai.request.max_tokens = 256
    emit(tracer, fake_request(1), drop=("gen_ai.request.max_tokens",))
    log = tmp_path / "traces.json"
    log.write_bytes(otlp_json(memory.get_finished_spans()) + b"\n")
    data = tmp_path / "data"
    summary = Ingestor(data, "otlp", endpoint="vllm-a", progress=False).ingest([log])
    assert summary.ingested == 2
    assert by_id(data) == {fake_request(0).request_id: 256, fake_request(1).request_id: None}


def test_vllm_bench_planned_output_tokens_become_max_tokens(tmp_path):
    raw = json.loads(VLLM_RUN.read_text())
    Ingestor(tmp_path / "a", "vllm-bench", endpoint="q", progress=False).ingest([VLLM_RUN])
    df = stored(tmp_path / "a").sort("arrival_ts")
    assert df["max_tokens"].to_list() == raw["planned_output_tokens"]
    # absent: null, and every other column as before
    del raw["planned_output_tokens"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(raw))
    Ingestor(tmp_path / "b", "vllm-bench", endpoint="q", progress=False).ingest([path])
    without = stored(tmp_path / "b").sort("arrival_ts")
    assert without["max_tokens"].null_count() == without.height
    assert without.drop("max_tokens").equals(df.drop("max_tokens"))


def _old_schema_file(data: Path, day: str = "2026-12-02") -> Path:
    """A requests file as written before ``max_tokens`` existed (the contract less that column)."""
    old = pa.schema([f for f in REQUESTS if f.name not in ADDED_COLUMNS["requests"]])
    ts = pa.array([1_796_216_700_000_000_000], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    table = pa.table({"request_id": ["old-0"], "endpoint": ["chat"], "arrival_ts": ts, "prefill_start_ts": ts,
                      "first_token_ts": ts, "end_ts": ts, "prompt_tokens": pa.array([5], pa.int32()),
                      "output_tokens": pa.array([3], pa.int32()), "status": ["ok"]}, schema=old)
    path = data / "requests" / f"date={day}" / "old.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return path


def test_old_request_files_read_with_max_tokens_null_untouched_and_unlogged(tmp_path):
    data = tmp_path / "data"
    endpoint_inventory(data, endpoint="chat", gpus=1)
    old = _old_schema_file(data)
    before = old.read_bytes()
    assert inspect_file(old, REQUESTS).exact  # nothing to convert: not a `casts` file for `wattline check`
    # a new file beside it, with the column
    summary, _ = ingest(tmp_path, jl(rec(0, max_tokens=128), rec(1)))
    assert summary.ingested == 2
    assert usable_files(data, "requests", "2026-12-02") == sorted((data / "requests" / "date=2026-12-02").glob("*.parquet"))
    assert old.read_bytes() == before and not (data / "quarantine" / "file_log").exists()
    with compute_connection(data, "2026-12-02") as con:
        rows = dict(con.execute("SELECT request_id, max_tokens FROM requests ORDER BY request_id").fetchall())
        assert rows == {"old-0": None, "r0": 128, "r1": None}
        # only old files: the column is still there, NULL
        (data / "requests" / "date=2026-12-02" / old.name).rename(tmp_path / "keep.parquet")
    for f in (data / "requests" / "date=2026-12-02").glob("*.parquet"):
        f.unlink()
    (tmp_path / "keep.parquet").rename(old)
    with compute_connection(data, "2026-12-02") as con:
        assert con.execute("SELECT request_id, max_tokens FROM requests").fetchall() == [("old-0", None)]
    assert old.read_bytes() == before


def test_a_row_stored_before_max_tokens_is_a_duplicate_when_read_again(tmp_path):
    """The same log line ingested before the column existed (stored NULL) and again now: one request."""
    data = tmp_path / "data"
    old = _old_schema_file(data)
    line = {"request_id": "old-0", "endpoint": "chat", "arrival_ts": "2026-12-02T13:05:00Z",
            "prefill_start_ts": "2026-12-02T13:05:00Z", "first_token_ts": "2026-12-02T13:05:00Z",
            "end_ts": "2026-12-02T13:05:00Z", "prompt_tokens": 5, "output_tokens": 3, "max_tokens": 64}
    summary, _ = ingest(tmp_path, jl(line))
    assert (summary.ingested, summary.duplicates, summary.quarantined) == (0, 1, 0)
    assert sorted((data / "requests").rglob("*.parquet")) == [old]
