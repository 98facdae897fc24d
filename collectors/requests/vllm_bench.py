"""Serving-benchmark per-request results (vLLM ``bench serve --save-result --save-detailed``) → requests.

The file is one JSON document of parallel arrays: ``input_lens``, ``output_lens``, ``ttfts``
(s), ``itls`` (s; one mean per request in some versions, a list of gaps per request in others),
per-request start times (Unix epoch s: ``request_timestamps``, or ``start_times``), and
optionally ``errors`` (empty string when the request succeeded) and the requested output length
(``max_tokens``, or ``planned_output_tokens`` as powertrace-sim's runs name the ``max_tokens`` they
send; → ``max_tokens``, null without either). Other arrays are ignored.

Derived: ``first_token_ts = start + ttft``; ``end_ts = first_token_ts + sum(itls[i])`` for a
list, ``+ itl × (output_len − 1)`` for a mean. The benchmark does not see the engine's
scheduling, so ``prefill_start_ts`` stays null. ``line_no`` of a rejected request is its
1-based position in the arrays. ``request_id`` is ``vllm-<start ns>-<input>-<output>``: built
from content, so the same results file ingested twice adds nothing.

Ranges are checked before any arithmetic: durations finite and 0..7 days, counts 0..2^31-1, the
start on a day the pipeline can run, the request at most 7 days long. A request with a bad value
anywhere in the arrays is one quarantined record; the file's other requests are stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from collectors.printable import printable
from collectors.requests.quarantine import Reject
from collectors.requests.records import (
    BadRecord,
    check_derived_times,
    dumps_exact,
    int32_count,
    loads,
    optional_count,
    seconds_to_ns,
)
from collectors.requests.store import rows_to_frame
from collectors.requests.timestamps import BadTimestamp, epoch_to_ns

START_KEYS = ("request_timestamps", "start_times", "request_start_times")
MAX_TOKENS_KEYS = ("max_tokens", "planned_output_tokens")
NEEDED = ("input_lens", "output_lens", "ttfts", "itls")


class NotBenchResult(ValueError):
    pass


def _record(doc: dict, start_key: str, i: int, endpoint: str) -> dict:
    def item(name):
        if i >= len(doc[name]):
            raise BadRecord(f"{name} has no entry {i + 1}")
        return doc[name][i]

    try:
        start_ns = epoch_to_ns(item(start_key))
    except BadTimestamp as exc:
        raise BadRecord(f"{start_key}: {exc}") from None
    prompt, output = int32_count(item("input_lens"), "input_lens"), int32_count(item("output_lens"), "output_lens")
    max_key = next((k for k in MAX_TOKENS_KEYS if isinstance(doc.get(k), list)), None)
    requested = doc[max_key][i] if max_key is not None and i < len(doc[max_key]) else None
    max_tokens = optional_count(requested, max_key) if max_key is not None else None
    errors = doc.get("errors") if isinstance(doc.get("errors"), list) else []
    error = errors[i] if i < len(errors) else ""
    ttft, itl = item("ttfts"), item("itls")
    first_ns = end_ns = None
    if not error:
        first_ns = start_ns + seconds_to_ns(ttft, "ttfts")
        if isinstance(itl, list):
            decode_ns = sum(seconds_to_ns(x, "itls") for x in itl)
        else:
            decode_ns = seconds_to_ns(itl, "itls") * max(output - 1, 0)
        end_ns = first_ns + decode_ns  # Python ints: bounded by check_derived_times before any cast
    row = {
        "request_id": f"vllm-{start_ns}-{prompt}-{output}",
        "endpoint": endpoint,
        "arrival_ts": start_ns,
        "prefill_start_ts": None,
        "first_token_ts": first_ns,
        "end_ts": end_ns,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "status": "error" if error else "ok",
        "max_tokens": max_tokens,
        "replica": None,  # a benchmark client does not see which replica served a request
    }
    check_derived_times(row)
    return row


class NoEndpoint(ValueError):
    """A results file that names no model, read without an endpoint: its requests belong to no one."""


def read_vllm_bench(path: Path, endpoint: str | None = None) -> tuple[pl.DataFrame, list[Reject]]:
    """All requests of one results file: (rows, rejects)."""
    source = str(path)
    try:
        doc = loads(Path(path).read_bytes())  # an integer of thousands of digits: read, never converted
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotBenchResult(f"{path}: not a JSON document ({exc})") from None
    except RecursionError:
        raise NotBenchResult(f"{path}: JSON nested too deeply to be a results file") from None
    if not isinstance(doc, dict):
        raise NotBenchResult(f"{path}: expected a JSON object of per-request arrays")
    missing = [k for k in NEEDED if not isinstance(doc.get(k), list)]
    start_key = next((k for k in START_KEYS if isinstance(doc.get(k), list)), None)
    if start_key is None:
        missing.append(" or ".join(START_KEYS))
    if missing:
        raise NotBenchResult(f"{path}: missing per-request array(s): {', '.join(missing)}")
    endpoint = endpoint or str(doc.get("model_id") or doc.get("model") or "")
    if not endpoint:
        raise NoEndpoint(f"{path}: the results file names no model: name the endpoint with --endpoint")
    used = (start_key, *NEEDED, "errors", *MAX_TOKENS_KEYS)
    rows, rejects = [], []
    for i in range(max(len(doc[k]) for k in (start_key, *NEEDED))):
        # the request's entries as one JSON object: its "raw line" for quarantine
        raw = dumps_exact({k: doc[k][i] for k in used if isinstance(doc.get(k), list) and i < len(doc[k])}, compact=False)
        try:
            row = _record(doc, start_key, i, endpoint)
        except BadRecord as exc:
            rejects.append(Reject(source, i + 1, str(exc), raw, len(raw)))
            continue
        except Exception as exc:  # a request no check foresaw: it alone is quarantined, never its file
            reason = f"request could not be read ({type(exc).__name__}: {printable(exc, 200)})"
            rejects.append(Reject(source, i + 1, reason, raw, len(raw)))
            continue
        row.update(_src=source, _line=i + 1, _raw=raw)
        rows.append(row)
    frame, unfit = rows_to_frame(rows)
    return frame, rejects + unfit
