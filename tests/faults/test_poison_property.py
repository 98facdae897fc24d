"""Hostile input II, property: random poison records mixed into good batches, through each request
importer: JSONL (`Ingestor`, bulk), vLLM bench results, OTLP JSON-lines files, and the OTLP
receiver's mapping of one export body in protobuf and in JSON (`otlp.map_body`, then the commit
the receiver's flush makes).

For every batch: each good record stored exactly once, each poison record quarantined (its id
in the quarantined raw record, or its line), nothing raised. Poison values are out of every
range: durations NaN, ±inf, negative or past 7 days up to 1e308; token counts negative, past
int32, or integers of up to 5,000 digits; starts before 2020, after tomorrow, or past 2⁶³."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.days import writable_ns_bounds
from collectors.requests.ingestor import Ingestor
from collectors.requests.otlp import map_body
from tests.faults.poison import (
    SPAN_NS,
    Raw,
    bench_doc,
    export_doc,
    export_protobuf,
    jsonl_record,
    quarantined,
    span_dict,
    stored_ids,
    to_json,
)

FIRST_NS, END_NS = writable_ns_bounds()
DAY_NS = 86_400 * 10**9
FUTURE_NS = END_NS + DAY_NS
"""The first instant past the writable days, a day later than at collection: the writable range
ends a fixed number of days after today, so a session that runs past midnight UTC moves END_NS
into it (an example drawn at END_NS was then stored)."""
SETTINGS = settings(max_examples=12, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

long_digits = st.integers(31, 5000).map(lambda n: Raw("9" * n))
bad_seconds = st.one_of(st.floats(604_800.5, 1e308), st.floats(-1e308, -1e-6),
                        st.sampled_from([math.nan, math.inf, -math.inf]))
bad_count64 = st.one_of(st.integers(2**31, 2**63 - 1), st.integers(-(2**63), -1))
bad_count_json = st.one_of(bad_count64, long_digits, long_digits.map(lambda r: Raw("-" + r.text)))
# Past int64 but with the span's end still inside OTLP's fixed64 (else the test's own protobuf
# encoder refuses the body before the receiver sees it).
bad_start = st.one_of(st.integers(1, FIRST_NS - 1), st.integers(FUTURE_NS, 2**63 - 1), st.integers(2**63, 2**64 - 1 - SPAN_NS))
bad_epoch_json = st.one_of(long_digits, st.floats(1e20, 1e308), st.floats(-1e308, -1.0),
                           st.sampled_from([math.nan, math.inf, "2200-01-01T00:00:00Z", "1999-12-31T23:59:59Z"]))


def _batch(poison: st.SearchStrategy) -> st.SearchStrategy:
    """A batch of 3..25 records: None for a good one, a poison override for a bad one."""
    return st.lists(st.one_of(st.none(), st.none(), poison), min_size=3, max_size=25)


def _check(data: Path, good: list[str], bad: list[str]) -> None:
    assert stored_ids(data) == sorted(good)
    q = quarantined(data)
    assert len(q) == len(bad), [x["reason"] for x in q]
    raws = b"\n".join(x["raw"] for x in q)
    for rid in bad:
        assert rid.encode() in raws, (rid, [x["reason"] for x in q])


jsonl_poison = st.one_of(
    st.tuples(st.sampled_from(["prompt_tokens", "output_tokens"]), bad_count_json),
    st.tuples(st.sampled_from(["arrival_ts", "end_ts"]), bad_epoch_json),
)


@SETTINGS
@given(batch=_batch(jsonl_poison))
def test_jsonl(batch):
    records = [jsonl_record(i, **({} if p is None else {p[0]: p[1]})) for i, p in enumerate(batch)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "app.jsonl"
        log.write_text("".join(to_json(r) + "\n" for r in records))
        Ingestor(Path(tmp) / "d", "jsonl", progress=False).ingest([log])
        _check(Path(tmp) / "d", [r["request_id"] for r, p in zip(records, batch, strict=True) if p is None],
               [r["request_id"] for r, p in zip(records, batch, strict=True) if p is not None])


bench_poison = st.one_of(
    st.tuples(st.just("ttfts"), bad_seconds),
    st.tuples(st.just("itls"), bad_seconds.map(lambda x: [0.01, x])),
    st.tuples(st.sampled_from(["input_lens", "output_lens"]), bad_count_json),
    st.tuples(st.just("request_timestamps"), bad_epoch_json.filter(lambda x: not isinstance(x, str))),
)


@SETTINGS
@given(batch=_batch(bench_poison))
def test_vllm_bench(batch):
    doc = bench_doc(len(batch), {i: {p[0]: p[1]} for i, p in enumerate(batch) if p is not None})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.json"
        path.write_text(to_json(doc))
        data = Path(tmp) / "d"
        Ingestor(data, "vllm-bench", progress=False).ingest([path])
        assert len(stored_ids(data)) == sum(p is None for p in batch)
        assert sorted(x["line_no"] for x in quarantined(data)) == [i + 1 for i, p in enumerate(batch) if p is not None]


NON_FINITE = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}
"""How OTLP/JSON (protobuf's JSON mapping) writes non-finite doubles."""


def _span_poison(json_only: bool) -> st.SearchStrategy:
    counts = bad_count_json if json_only else bad_count64.map(str)  # int64 as a JSON string, as OTLP writes it
    starts = st.one_of(bad_start, st.integers(2**64, 10**30)) if json_only else bad_start
    return st.one_of(
        st.tuples(st.sampled_from(["gen_ai.latency.e2e", "gen_ai.latency.time_to_first_token",
                                   "gen_ai.latency.time_in_model_prefill"]),
                  bad_seconds.map(lambda x: Raw(repr(x) if math.isfinite(x) else NON_FINITE[repr(x)]))),
        st.tuples(st.sampled_from(["gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"]), counts),
        st.tuples(st.just("start_ns"), starts),
    )


def _spans(batch) -> tuple[list[dict], list[str], list[str]]:
    spans, good, bad = [], [], []
    for i, p in enumerate(batch):
        if p is None:
            spans.append(span_dict(i))
        elif p[0] == "start_ns":
            spans.append(span_dict(i, start_ns=p[1]))
        else:
            spans.append(span_dict(i, **{p[0]: p[1]}))
        (good if p is None else bad).append(f"cmpl-{i:05d}")
    return spans, good, bad


@SETTINGS
@given(batch=_batch(_span_poison(json_only=True)))
def test_otlp_file(batch):
    spans, good, bad = _spans(batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces.jsonl"
        half = len(spans) // 2
        path.write_text(to_json(export_doc(spans[:half])) + "\n" + to_json(export_doc(spans[half:])) + "\n")
        Ingestor(Path(tmp) / "d", "otlp", endpoint="vllm-a", progress=False).ingest([path])
        _check(Path(tmp) / "d", good, bad)


@SETTINGS
@given(batch=_batch(_span_poison(json_only=False)), is_json=st.booleans())
def test_otlp_receiver_mapping(batch, is_json):
    spans, good, bad = _spans(batch)
    body = to_json(export_doc(spans)).encode() if is_json else export_protobuf(spans)
    with tempfile.TemporaryDirectory() as tmp:
        ingestor = Ingestor(Path(tmp) / "d", "otlp", endpoint="vllm-a", progress=False)
        mapped = map_body(body, is_json=is_json, source="otlp-http://test", endpoint="vllm-a")
        assert mapped.rejected == len(bad)  # what partial_success.rejected_spans answers
        ingestor.commit(mapped.frame, mapped.rejects)
        _check(Path(tmp) / "d", good, bad)


@SETTINGS
@given(batch=_batch(_span_poison(json_only=True)))
def test_otlp_receiver_mapping_json_only_values(batch):
    """Values only JSON can carry (a start past 2⁶⁴, integers of thousands of digits)."""
    spans, good, bad = _spans(batch)
    with tempfile.TemporaryDirectory() as tmp:
        mapped = map_body(to_json(export_doc(spans)).encode(), is_json=True, source="otlp-http://test", endpoint="vllm-a")
        assert mapped.rejected == len(bad)
        Ingestor(Path(tmp) / "d", "otlp", endpoint="vllm-a", progress=False).commit(mapped.frame, mapped.rejects)
        _check(Path(tmp) / "d", good, bad)
