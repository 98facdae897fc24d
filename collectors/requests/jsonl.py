"""Canonical request log lines (JSONL) → a parsed batch plus rejects.

Fast path: the whole chunk through ``polars.read_ndjson`` and vectorised checks. Any row the
vectorised checks cannot vouch for (and every row of a chunk polars cannot read: bad JSON,
bad UTF-8, odd types) is re-checked by :func:`records.validate`, the single source of truth
for what is accepted and why something is not.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import polars as pl

from collectors.contract import REQUEST_STATUSES
from collectors.days import write_day_problem
from collectors.printable import printable
from collectors.requests.lines import Block, Line
from collectors.requests.quarantine import Reject
from collectors.requests.records import (
    DEFAULT_STATUS,
    INT32_MAX,
    MAX_DURATION_S,
    MAX_TOKENS,
    REPLICA,
    REQUIRED_TS,
    TS_FIELDS,
    BadRecord,
    loads,
    validate,
)
from collectors.requests.store import FRAME_SCHEMA, empty_frame, rows_to_frame
from collectors.requests.timestamps import BadTimestamp, column_to_ns, to_ns, utc_day

_TEXT_OK = (pl.String, pl.Null)
_TS_OK = (pl.String, pl.Int64, pl.Float64, pl.Null)
_INT_OK = (pl.Int64, pl.Null)
_STRING_ID = re.compile(rb'"request_id"\s*:\s*"')
_STRING_ENDPOINT = re.compile(rb'"endpoint"\s*:\s*"')
_REPLICA_KEY = re.compile(rb'"replica"\s*:')
_STRING_REPLICA = re.compile(rb'"replica"\s*:\s*(?:"|null)')
DEFAULT_MAX_DEPTH = 64
"""Deepest bracket nesting a line may have (``--max-depth``): a request record needs 2 or 3.
Python's ``json`` recurses once per level and raises RecursionError near 1000; the limit turns
such a line into a quarantined one instead of a crash."""
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
CONTRACT_FIELDS = ("request_id", "endpoint", *TS_FIELDS, "prompt_tokens", "output_tokens", "status", MAX_TOKENS, REPLICA)
INFER_ROWS = 1000
"""polars infers column types from this many rows and fails (→ per-line path) on a later type change;
inferring from every row would double the parse time."""


def nesting_depth(data: bytes) -> int:
    """Deepest ``[``/``{`` nesting of a JSON text, brackets inside strings not counted (for
    invalid JSON, e.g. an unterminated string, an upper bound). No recursion: a bracket count."""
    body = np.frombuffer(_JSON_STRING.sub(b'""', data), np.uint8)
    step = (body == 0x5B).astype(np.int32) + (body == 0x7B) - (body == 0x5D) - (body == 0x7D)
    return int(np.cumsum(step).max(initial=0))


def too_deep(data: bytes, max_depth: int) -> bool:
    # cheap first: a line needs more opening brackets than the limit to nest deeper than it
    return data.count(b"[") + data.count(b"{") > max_depth and nesting_depth(data) > max_depth


def _deep_lines(data: bytes, n_lines: int, max_depth: int) -> list[int]:
    """Indices of the block's lines with more opening brackets than ``max_depth`` (the candidates
    for :func:`too_deep`), vectorised: a few ms per 8 MiB block."""
    arr = np.frombuffer(data, np.uint8)
    opens = np.flatnonzero((arr == 0x5B) | (arr == 0x7B))
    if len(opens) <= max_depth:
        return []
    line_of = np.searchsorted(np.flatnonzero(arr == 0x0A), opens)
    same = line_of[max_depth:] == line_of[:-max_depth]  # opener k and k + max_depth on one line
    return np.unique(line_of[max_depth:][same]).tolist() if same.any() else []


def parse_lines(lines: list[Line], source: str, default_endpoint: str | None = None,
                max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[pl.DataFrame, list[Reject]]:
    """Parse a chunk of lines of one file; rows keep the input order."""
    rejects: list[Reject] = []
    candidates: list[Line] = []
    for line in lines:
        if line.too_long:
            rejects.append(Reject(source, line.number, "line too long", line.data, line.length))
        elif too_deep(line.data, max_depth):
            rejects.append(Reject(source, line.number, f"nested too deep (over {max_depth} levels)", line.data, line.length))
        elif line.data.strip():  # blank lines carry no record
            candidates.append(line)
    fast_ok = [ln for ln in candidates if ln.complete]
    slow = [ln for ln in candidates if not ln.complete]
    good = empty_frame()
    if fast_ok:
        raws = [ln.data for ln in fast_ok]
        good, unsure = _vectorised(raws, pl.Series([ln.number for ln in fast_ok], dtype=pl.Int64), source, default_endpoint)
        slow = [fast_ok[i] for i in unsure] + slow
    return _with_slow(good, rejects, slow, source, default_endpoint)


def parse_block(block: Block, source: str, default_endpoint: str | None = None,
                max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[pl.DataFrame, list[Reject]]:
    """Parse a block of whole lines without a Python object per line (the bulk path)."""
    if not block.data.endswith(b"\n"):  # the file's unterminated last line is judged on its own
        cut = block.data.rfind(b"\n") + 1
        last = Line(block.first_line + block.n_lines - 1, 0, 0, block.data[cut:], len(block.data) - cut, complete=False)
        tail, tail_rejects = parse_lines([last], source, default_endpoint, max_depth)
        if cut == 0:
            return tail, tail_rejects
        head, head_rejects = parse_block(Block(block.data[:cut], block.first_line, block.n_lines - 1, 0), source,
                                         default_endpoint, max_depth)
        return pl.concat([head, tail]), head_rejects + tail_rejects
    raws = block.data.split(b"\n")[: block.n_lines]
    lines = lambda idx: [Line(block.first_line + i, 0, 0, raws[i], len(raws[i])) for i in idx]  # noqa: E731
    deep = any(too_deep(raws[i], max_depth) for i in _deep_lines(block.data, len(raws), max_depth))
    if deep or b"\n\n" in block.data or block.data.startswith(b"\n"):
        # blank lines: row i would not be line i; a deep line: judged (and kept from polars) one by one
        return parse_lines(lines(range(len(raws))), source, default_endpoint, max_depth)
    if not raws:
        return empty_frame(), []
    numbers = pl.int_range(block.first_line, block.first_line + len(raws), dtype=pl.Int64, eager=True)
    good, unsure = _vectorised(raws, numbers, source, default_endpoint, data=block.data)
    return _with_slow(good, [], lines(unsure), source, default_endpoint)


def _with_slow(good, rejects, slow, source, default_endpoint) -> tuple[pl.DataFrame, list[Reject]]:
    if slow:
        rows, more = _per_line(slow, source, default_endpoint)
        rejects = rejects + more
        if rows.height:
            good = pl.concat([good, rows]).sort("_line")
    return good, sorted(rejects, key=lambda r: r.line_no)


def _per_line(lines: list[Line], source: str, default_endpoint: str | None) -> tuple[pl.DataFrame, list[Reject]]:
    rows, rejects = [], []
    for line in lines:
        obj = None
        try:
            try:
                text = line.data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadRecord(f"invalid UTF-8 at byte {exc.start}") from None
            try:
                obj = loads(text)  # an integer of thousands of digits is read, never converted
            except json.JSONDecodeError as exc:
                what = "truncated last line (no newline at end of file)" if not line.complete else "invalid JSON"
                raise BadRecord(f"{what}: {exc.msg} at column {exc.colno}") from None
            except RecursionError:  # only past the depth check's bound (a --max-depth near 1000)
                raise BadRecord("nested too deep for the JSON parser") from None
            row = validate(obj, default_endpoint)
        except BadRecord as exc:
            rejects.append(Reject(source, line.number, str(exc), line.data, line.length, _arrival_day(obj)))
            continue
        except Exception as exc:  # a record no check foresaw: it alone is quarantined, never its file
            reason = f"record could not be read ({type(exc).__name__}: {printable(exc, 200)})"
            rejects.append(Reject(source, line.number, reason, line.data, line.length))
            continue
        row.update(_src=source, _line=line.number, _raw=line.data)
        rows.append(row)
    frame, unfit = rows_to_frame(rows)
    return frame, rejects + unfit


def _arrival_day(obj) -> str | None:
    """The day a rejected line belongs to, when its arrival time is readable."""
    if isinstance(obj, dict) and obj.get("arrival_ts") is not None:
        try:
            ns = to_ns(obj["arrival_ts"])
        except (BadTimestamp, ValueError, OverflowError):
            return None
        day = utc_day(ns)
        return None if write_day_problem(day) else day  # no quarantine folder for a day no run reaches
    return None


def _vectorised(
    raws: list[bytes], numbers: pl.Series, source: str, default_endpoint: str | None, data: bytes | None = None
) -> tuple[pl.DataFrame, list[int]]:
    """(rows the vectorised checks accept, indices of lines to re-check one by one)."""
    try:
        return _vectorised_checks(raws, numbers, source, default_endpoint, data)
    except Exception:  # anything the fast path cannot vouch for is judged line by line
        return empty_frame(), list(range(len(raws)))


def _vectorised_checks(
    raws: list[bytes], numbers: pl.Series, source: str, default_endpoint: str | None, data: bytes | None
) -> tuple[pl.DataFrame, list[int]]:
    everything = list(range(len(raws)))
    data = data if data is not None else b"\n".join(raws)
    if not _ids_are_strings(data, len(raws)):
        return empty_frame(), everything
    try:
        df = pl.read_ndjson(io.BytesIO(data), infer_schema_length=INFER_ROWS)
        if any(f'"{name}"'.encode() in data for name in CONTRACT_FIELDS if name not in df.schema):
            # a field first seen after the inference window would be dropped silently: infer from all rows
            df = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
    except Exception:  # bad JSON or UTF-8 anywhere, or a type change after the first rows
        return empty_frame(), everything
    if df.height != len(raws) or not _types_ok(df.schema):
        return empty_frame(), everything

    def col(name: str, dtype=pl.String) -> pl.Expr:
        return pl.col(name) if name in df.schema else pl.lit(None, dtype)

    endpoint = col("endpoint")
    if default_endpoint is not None:
        endpoint = endpoint.fill_null(pl.lit(default_endpoint))
    ns = {name: column_to_ns(name, df.schema.get(name)) for name in TS_FIELDS}
    parsed = df.select(
        request_id=col("request_id"),
        endpoint=endpoint,
        **ns,
        prompt_tokens=col("prompt_tokens", pl.Int64),
        output_tokens=col("output_tokens", pl.Int64),
        status=col("status").fill_null(pl.lit(DEFAULT_STATUS)),
        max_tokens=col(MAX_TOKENS, pl.Int64),
        replica=pl.when(col(REPLICA).str.len_bytes() > 0).then(col(REPLICA)),  # "" names nothing: null
        _given=pl.struct(*(col(n, pl.Null).is_not_null().alias(n) for n in TS_FIELDS)),
    )
    clean = (
        (pl.col("request_id").str.len_bytes() > 0)
        & (pl.col("endpoint").str.len_bytes() > 0)
        & pl.col("status").is_in(REQUEST_STATUSES)
        & pl.all_horizontal(pl.col(t).is_between(0, INT32_MAX) for t in ("prompt_tokens", "output_tokens"))
        & (pl.col(MAX_TOKENS).is_null() | pl.col(MAX_TOKENS).is_between(0, INT32_MAX))
        & pl.all_horizontal(pl.col(n).is_not_null() for n in REQUIRED_TS)
        # a value given but not converted by the fast parser: let the per-line parser decide
        & pl.all_horizontal(pl.col(n).is_not_null() | ~pl.col("_given").struct.field(n) for n in TS_FIELDS)
        & _ordered()
        & ((pl.col("end_ts") - pl.col("arrival_ts")) <= MAX_DURATION_S * 1_000_000_000)
    ).fill_null(False)
    parsed = parsed.with_columns(_src=pl.lit(source), _line=numbers, _raw=pl.Series(raws, dtype=pl.Binary), _clean=clean)
    unsure = parsed.with_row_index("_i").filter(~pl.col("_clean"))["_i"].to_list()
    good = parsed.filter(pl.col("_clean")).select(list(FRAME_SCHEMA)).cast(FRAME_SCHEMA)
    return good, unsure


def _ids_are_strings(data: bytes, n_lines: int) -> bool:
    """Every line names ``request_id`` (and any ``endpoint``, ``replica``) literally, with a string value.

    polars would read ``"request_id": 7`` into a string column as ``"7"``; the contract (and the
    per-line path) rejects it, so such chunks must not take the fast path.
    """
    if data.count(b'"request_id"') != n_lines or len(_STRING_ID.findall(data)) != n_lines:
        return False
    if b'"replica"' in data and len(_REPLICA_KEY.findall(data)) != len(_STRING_REPLICA.findall(data)):
        return False  # a number or list as replica: polars would turn it into text, the per-line path checks it
    return data.count(b'"endpoint"') == len(_STRING_ENDPOINT.findall(data))


def _types_ok(schema: pl.Schema) -> bool:
    allowed = {"request_id": _TEXT_OK, "endpoint": _TEXT_OK, "status": _TEXT_OK, REPLICA: _TEXT_OK}
    allowed.update({n: _TS_OK for n in TS_FIELDS})
    allowed.update({n: _INT_OK for n in ("prompt_tokens", "output_tokens", MAX_TOKENS)})
    return all(schema[name] in ok for name, ok in allowed.items() if name in schema)


def _ordered() -> pl.Expr:
    """Every pair of present timestamps in contract order (equivalent to the per-line consecutive check)."""
    checks = [
        pl.col(a).is_null() | pl.col(b).is_null() | (pl.col(b) >= pl.col(a))
        for i, a in enumerate(TS_FIELDS)
        for b in TS_FIELDS[i + 1 :]
    ]
    return pl.all_horizontal(checks)
