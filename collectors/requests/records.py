"""One request record (a parsed JSON object) checked against the contract: the per-line truth.

The vectorised JSONL path only ever *accepts* rows this function would accept with the same
values; everything it is unsure about comes here, so quarantine reasons have one source.
"""

from __future__ import annotations

from collectors.contract import REQUEST_STATUSES
from collectors.requests.timestamps import BadTimestamp, to_ns

TS_FIELDS = ("arrival_ts", "prefill_start_ts", "first_token_ts", "end_ts")
"""In the order they must happen."""
REQUIRED_TS = ("arrival_ts", "end_ts")
TOKEN_FIELDS = ("prompt_tokens", "output_tokens")
INT32_MAX = 2**31 - 1
DEFAULT_STATUS = "ok"


class BadRecord(ValueError):
    """Why a record was rejected; ``str()`` is the quarantine reason."""


def _text(obj: dict, name: str, default: str | None = None) -> str:
    value = obj.get(name)
    if value is None:  # absent or null: the caller's default, if any
        value = default
    if value is None:
        raise BadRecord(f"missing field {name}")
    if not isinstance(value, str) or not value:
        raise BadRecord(f"{name} must be a non-empty string, got {type(value).__name__}")
    return value


def _tokens(obj: dict, name: str) -> int:
    value = obj.get(name)
    if value is None:
        raise BadRecord(f"missing field {name}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{name} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise BadRecord(f"{name} is negative")
    if value > INT32_MAX:
        raise BadRecord(f"{name} exceeds int32")
    return value


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
        raise BadRecord(f"status must be one of {', '.join(REQUEST_STATUSES)}, got {status!r}")
    row["status"] = status
    check_order(row)
    return row


def check_order(row: dict) -> None:
    """arrival ≤ prefill start ≤ first token ≤ end, over the fields present."""
    present = [(n, row[n]) for n in TS_FIELDS if row.get(n) is not None]
    for (a, ta), (b, tb) in zip(present, present[1:], strict=False):
        if tb < ta:
            raise BadRecord(f"{b} before {a}")
