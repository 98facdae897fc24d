"""One request record (a parsed JSON object) checked against the contract: the per-line truth.

The vectorised JSONL path only ever *accepts* rows this function would accept with the same
values; everything it is unsure about comes here, so quarantine reasons have one source.
"""

from __future__ import annotations

import json
import math
import uuid

from collectors.contract import REQUEST_STATUSES
from collectors.days import writable_ns_bounds, write_day_problem
from collectors.requests.quarantine import OUT_OF_RANGE
from collectors.requests.timestamps import BadTimestamp, to_ns, utc_day

TS_FIELDS = ("arrival_ts", "prefill_start_ts", "first_token_ts", "end_ts")
"""In the order they must happen."""
REQUIRED_TS = ("arrival_ts", "end_ts")
TOKEN_FIELDS = ("prompt_tokens", "output_tokens")
MAX_TOKENS = "max_tokens"
"""Optional: the output length the client asked for (a cap on output_tokens), null when not logged."""
REPLICA = "replica"
"""Optional: the id of the endpoint's replica (engine instance) that served the request."""
INT32_MAX = 2**31 - 1
DEFAULT_STATUS = "ok"
NS_MAX = 2**63 - 1
"""The last instant an int64 nanosecond timestamp holds (year 2262)."""
MAX_DURATION_S = 7 * 86_400
"""Longest duration a record may state (a latency in seconds) and longest request (arrival to end):
far above any LLM request, far below where nanoseconds leave int64."""
MAX_INT_DIGITS = 30
"""JSON integers with more digits than this are out of every field's range: they are read as a
stand-in (:class:`LongInteger`), never converted (Python refuses ints of over 4300 digits)."""


class BadRecord(ValueError):
    """Why a record was rejected; ``str()`` is the quarantine reason."""


class LongInteger(int):
    """A JSON integer too long for any field: ±10**MAX_INT_DIGITS, so every range check rejects it,
    remembering its text (for the quarantined raw record) and printing as its digit count."""

    text: str

    def __new__(cls, text: str) -> LongInteger:
        obj = super().__new__(cls, -(10**MAX_INT_DIGITS) if text.startswith("-") else 10**MAX_INT_DIGITS)
        obj.text = text
        return obj

    def __repr__(self) -> str:
        return f"an integer of {len(self.text.lstrip('-'))} digits"

    __str__ = __repr__


def _parse_int(text: str) -> int:
    return int(text) if len(text) <= MAX_INT_DIGITS else LongInteger(text)


def loads(data: bytes | str):
    """``json.loads`` that never converts an integer of more than MAX_INT_DIGITS digits (see :class:`LongInteger`)."""
    return json.loads(data, parse_int=_parse_int)


def dumps_exact(value, compact: bool = True) -> bytes:
    """JSON of a value read by :func:`loads` (compact, or ``json.dumps``' default spacing), long
    integers written with their own digits."""
    longs: list[str] = []
    mark = uuid.uuid4().hex  # a placeholder no input can forge

    def swap(v):
        if isinstance(v, LongInteger):
            longs.append(v.text)
            return f"{mark}-{len(longs) - 1}"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(value), separators=(",", ":") if compact else None)
    for i, digits in enumerate(longs):
        text = text.replace(f'"{mark}-{i}"', digits, 1)
    return text.encode()


def shown(value, limit: int = 60) -> str:
    """A value for a reason: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text) - limit} more characters)"


def seconds_to_ns(value, name: str) -> int:
    """A duration in seconds (a JSON or OTLP number) → integer ns by ``floor(s × 1e9 + 0.5)``, the
    range checked before any cast: finite, 0..MAX_DURATION_S."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"{name} must be a non-negative number of seconds, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRecord(f"{name} must be a finite number of seconds, got {shown(value)}")
    if value < 0:
        raise BadRecord(f"{name} must be a non-negative number of seconds, got {shown(value)}")
    if value > MAX_DURATION_S:
        raise BadRecord(f"{name} over {MAX_DURATION_S} s (7 days), got {shown(value)}")
    return math.floor(value * 1e9 + 0.5)


def int32_count(value, name: str) -> int:
    """A token count: a JSON/OTLP integer in 0..2^31-1 (compared, never cast)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{name} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise BadRecord(f"{name} is negative")
    if value > INT32_MAX:
        raise BadRecord(f"{name} exceeds int32")
    return value


def arrival_problem(ns: int) -> str | None:
    """Why a request arriving at ``ns`` cannot be stored (a day the pipeline cannot run), or None."""
    first, end = writable_ns_bounds()
    if first <= ns < end:
        return None
    return f"{OUT_OF_RANGE}: {write_day_problem(utc_day(ns)) if 0 <= ns < 2**64 else 'not a time the pipeline can run'}"


def check_derived_times(row: dict) -> None:
    """For rows built from a start and durations (OTLP spans, benchmark results): the arrival on a
    day the pipeline can run, the request at most MAX_DURATION_S long, every instant an int64 ns."""
    problem = arrival_problem(row["arrival_ts"])
    if problem:
        raise BadRecord(problem)
    check_order(row)
    last = max(row[n] for n in TS_FIELDS if row.get(n) is not None)
    if last - row["arrival_ts"] > MAX_DURATION_S * 1_000_000_000:
        raise BadRecord(f"request longer than {MAX_DURATION_S} s (7 days) from arrival_ts to its last time")


def _text(obj: dict, name: str, default: str | None = None) -> str:
    value = obj.get(name)
    if value is None:  # absent or null: the caller's default, if any
        value = default
    if value is None:
        raise BadRecord(f"missing field {name}")
    if not isinstance(value, str) or not value:
        raise BadRecord(f"{name} must be a non-empty string, got {type(value).__name__}")
    return value


def optional_count(value, name: str) -> int | None:
    """An optional token count (``max_tokens``): absent or null stays None, else 0..2^31-1."""
    return None if value is None else int32_count(value, name)


def optional_replica(value, name: str = REPLICA) -> str | None:
    """An optional replica id: absent, null or empty stays None (it names nothing); a string is kept
    as it is and an integer becomes its decimal text (exact); any other type is a bad record."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadRecord(f"{name} must be a string (or an integer), got {type(value).__name__}")


def _tokens(obj: dict, name: str) -> int:
    value = obj.get(name)
    if value is None:
        raise BadRecord(f"missing field {name}")
    return int32_count(value, name)


def validate(obj, default_endpoint: str | None = None) -> dict:
    """A contract row (timestamps as epoch ns) from one JSON value, or :class:`BadRecord`.

    Unknown fields are ignored so a gateway can log more than wattline reads. ``endpoint``
    may be left out of each line when the caller names it once (``--endpoint``).
    """
    if not isinstance(obj, dict):
        raise BadRecord(f"not a JSON object ({type(obj).__name__})")
    row = {"request_id": _text(obj, "request_id"), "endpoint": _text(obj, "endpoint", default_endpoint)}
    for name in TS_FIELDS:
        value = obj.get(name)
        if value is None:
            if name in REQUIRED_TS:
                raise BadRecord(f"missing field {name}")
            row[name] = None
            continue
        try:
            row[name] = to_ns(value)
        except BadTimestamp as exc:
            raise BadRecord(f"{name}: {exc}") from None
    for name in TOKEN_FIELDS:
        row[name] = _tokens(obj, name)
    status = obj.get("status")
    if status is None:
        status = DEFAULT_STATUS
    if status not in REQUEST_STATUSES:
        raise BadRecord(f"status must be one of {', '.join(REQUEST_STATUSES)}, got {shown(status)}")
    row["status"] = status
    row[MAX_TOKENS] = optional_count(obj.get(MAX_TOKENS), MAX_TOKENS)
    row[REPLICA] = optional_replica(obj.get(REPLICA))
    check_order(row)
    if row["end_ts"] - row["arrival_ts"] > MAX_DURATION_S * 1_000_000_000:
        raise BadRecord(f"request longer than {MAX_DURATION_S} s (7 days) from arrival_ts to end_ts")
    return row


def check_order(row: dict) -> None:
    """arrival ≤ prefill start ≤ first token ≤ end, over the fields present."""
    present = [(n, row[n]) for n in TS_FIELDS if row.get(n) is not None]
    for (a, ta), (b, tb) in zip(present, present[1:], strict=False):
        if tb < ta:
            raise BadRecord(f"{b} before {a}")
