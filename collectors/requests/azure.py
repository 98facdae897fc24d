"""Azure LLM inference traces (``TIMESTAMP,ContextTokens,GeneratedTokens``) → requests, or arrivals.

Covers the 2023 one-hour files (7 fractional digits, no trailing newline) and the 2024
week-long files (mixed sub-second precision). Timestamps carry no zone and are UTC. The traces
are arrival-only: ``prefill_start_ts``, ``first_token_ts``, ``end_ts`` and ``status`` stay null.

``request_id`` is built from the row's content, ``az-<arrival ns>-<prompt>-<output>`` (plus
``-<k>`` for the k-th identical row), so re-ingesting a file, or the same rows from another
copy, adds nothing.

Parsing is vectorised per block of lines; a block polars cannot read as CSV (bad UTF-8, a
ragged row) is split in Python into the same string columns, so the checks are the same code.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

from collectors.requests.lines import DEFAULT_MAX_LINE_BYTES, Block, Line, iter_blocks
from collectors.requests.quarantine import Reject
from collectors.requests.records import INT32_MAX
from collectors.requests.store import FRAME_SCHEMA
from collectors.requests.timestamps import utc_day
from collectors.simulate.arrivals import Arrivals

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_STR = ["ts", "prompt", "output"]
_NEAR_NS = 60 * 1_000_000_000
"""Identical rows are numbered across blocks when within a minute of each other (time-sorted traces)."""

class NotAzureTrace(ValueError):
    pass


def _check_header(fh) -> int:
    """Validate the header line; returns the offset of the first data line."""
    head = fh.readline(4096)
    names = tuple(x.strip() for x in head.decode("utf-8-sig", "replace").strip().split(","))
    if names != HEADER:
        raise NotAzureTrace(f"{fh.name}: expected the header {','.join(HEADER)}, found {head[:80]!r}")
    return fh.tell()


def _block_strings(block: Block) -> tuple[pl.DataFrame, list[tuple[int, str, bytes]]]:
    """(string columns + line numbers, [(line, reason, raw)] for lines that are not 3 fields)."""
    if block.data.count(b",") != 2 * block.n_lines:  # some row is not 3 fields: name it, per line
        return _split_lines(block)
    try:
        df = pl.read_csv(io.BytesIO(block.data), has_header=False, new_columns=_STR, infer_schema=False,
                         quote_char=None)
        if df.height == block.n_lines and df.width == 3:
            return df.with_columns(_line=pl.int_range(block.first_line, block.first_line + df.height, dtype=pl.Int64)), []
    except Exception:
        pass
    return _split_lines(block)


def _split_lines(block: Block) -> tuple[pl.DataFrame, list[tuple[int, str, bytes]]]:
    rows, bad = [], []
    for i, raw in enumerate(block.data.split(b"\n")[: block.n_lines]):
        line_no = block.first_line + i
        try:
            fields = raw.decode("utf-8").rstrip("\r").split(",")
        except UnicodeDecodeError as exc:
            bad.append((line_no, f"invalid UTF-8 at byte {exc.start}", raw))
            continue
        if len(fields) != 3:
            if raw.strip():
                bad.append((line_no, f"expected 3 fields, got {len(fields)}", raw))
            continue
        rows.append((*fields, line_no))
    return pl.DataFrame(rows, schema=[*_STR, "_line"], orient="row").cast({"_line": pl.Int64}), bad


def _validate(df: pl.DataFrame) -> pl.DataFrame:
    """Parsed columns plus ``reason`` (null when the row is good)."""
    ts = pl.col("ts").str.strip_chars().str.replace("T", " ")
    naive = ts.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", time_zone="UTC", strict=False)
    zoned = ts.str.to_datetime("%Y-%m-%d %H:%M:%S%.f%:z", time_unit="ns", time_zone="UTC", strict=False)
    tokens = {c: pl.col(c).str.strip_chars().cast(pl.Int64, strict=False) for c in ("prompt", "output")}
    df = df.with_columns(arrival_ns=pl.coalesce(naive, zoned).dt.epoch("ns"), p=tokens["prompt"], o=tokens["output"])
    reason = pl.when(pl.col("arrival_ns").is_null()).then(pl.lit("TIMESTAMP: not a timestamp"))
    for col, name in (("p", "ContextTokens"), ("o", "GeneratedTokens")):
        reason = reason.when(pl.col(col).is_null()).then(pl.lit(f"{name}: not an integer"))
        reason = reason.when(pl.col(col) < 0).then(pl.lit(f"{name} is negative"))
        reason = reason.when(pl.col(col) > INT32_MAX).then(pl.lit(f"{name} exceeds int32"))
    return df.with_columns(reason=reason.otherwise(None))


class _Occurrences:
    """Numbers identical rows (k-th copy) across blocks, remembering only recent keys."""

    def __init__(self) -> None:
        self.recent = pl.DataFrame(schema={"arrival_ns": pl.Int64, "p": pl.Int64, "o": pl.Int64, "_n": pl.UInt32})

    def number(self, good: pl.DataFrame) -> pl.Series:
        key = ["arrival_ns", "p", "o"]
        good = good.join(self.recent, on=key, how="left").with_columns(pl.col("_n").fill_null(0))
        if good.select(pl.struct(key).is_duplicated().any()).item():
            good = good.with_columns(_k=pl.int_range(pl.len(), dtype=pl.UInt32).over(key) + pl.col("_n"))
        else:  # the usual case: every row distinct, no window needed
            good = good.with_columns(_k=pl.col("_n"))
        seen = good.group_by(key).agg(_n=pl.col("_k").max() + 1)
        cutoff = good["arrival_ns"].max() - _NEAR_NS
        self.recent = (
            pl.concat([self.recent.join(seen, on=key, how="anti"), seen])
            .filter(pl.col("arrival_ns") >= cutoff)
        )
        return good["_k"]


def _to_frame(good: pl.DataFrame, k: pl.Series, source: str, endpoint: str) -> pl.DataFrame:
    rid = pl.format("az-{}-{}-{}", "arrival_ns", "p", "o")
    rid = pl.when(pl.col("_k") > 0).then(pl.format("{}-{}", rid, "_k")).otherwise(rid)
    return good.with_columns(_k=k).select(
        request_id=rid,
        endpoint=pl.lit(endpoint),
        arrival_ts=pl.col("arrival_ns"),
        prefill_start_ts=pl.lit(None, pl.Int64),
        first_token_ts=pl.lit(None, pl.Int64),
        end_ts=pl.lit(None, pl.Int64),
        prompt_tokens=pl.col("p").cast(pl.Int32),
        output_tokens=pl.col("o").cast(pl.Int32),
        status=pl.lit(None, pl.String),
        max_tokens=pl.lit(None, pl.Int32),
        replica=pl.lit(None, pl.String),
        _src=pl.lit(source),
        _line=pl.col("_line"),
        _raw=pl.lit(None, pl.Binary),
    ).cast(FRAME_SCHEMA)


def read_azure(
    path: Path,
    endpoint: str,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_bytes=lambda n: None,
) -> Iterator[tuple[pl.DataFrame, list[Reject]]]:
    """Yield (request rows, rejects) per block of the trace at ``path``."""
    source = str(path)
    occurrences = _Occurrences()
    with open(path, "rb") as fh:
        start = _check_header(fh)
        on_bytes(start)
        done = start
        for item in iter_blocks(fh, max_line_bytes=max_line_bytes, start=start, line_no=2):
            if isinstance(item, Line):  # iter_blocks hands out single lines only when too long
                yield _empty(), [Reject(source, item.number, "line too long", item.data, item.length)]
                continue
            strings, bad = _block_strings(item)
            rejects = [Reject(source, n, why, raw, len(raw)) for n, why, raw in bad]
            checked = _validate(strings)
            for row in checked.filter(pl.col("reason").is_not_null()).iter_rows(named=True):
                raw = ",".join(row[c] or "" for c in _STR).encode()
                day = utc_day(row["arrival_ns"]) if row["arrival_ns"] is not None else None
                rejects.append(Reject(source, row["_line"], row["reason"], raw, len(raw), day))
            good = checked.filter(pl.col("reason").is_null())
            frame = _to_frame(good, occurrences.number(good), source, endpoint) if good.height else _empty()
            on_bytes(max(0, item.end - done) if isinstance(item, Block) else 0)
            done = max(done, item.end)
            yield frame, sorted(rejects, key=lambda r: r.line_no)


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def azure_arrivals(path: Path | str, origin: str = "first") -> Arrivals:
    """The valid arrivals of an Azure trace, sorted by time, as the simulator's :class:`Arrivals`.

    ``origin="first"``: offsets count from the first arrival (a one-hour trace starts the
    simulation at once); ``origin="midnight"``: from 00:00 UTC of its first day, so a week-long
    trace keeps its diurnal placement.
    """
    frames = [f for f, _ in read_azure(Path(path), "replay") if f.height]
    if not frames:
        raise NotAzureTrace(f"{path}: no valid rows")
    df = pl.concat(frames).sort("arrival_ts")
    t = df["arrival_ts"].to_numpy()
    if origin == "first":
        t0 = t[0]
    elif origin == "midnight":
        t0 = t[0] - t[0] % (86_400 * 1_000_000_000)
    else:
        raise ValueError(f"origin must be 'first' or 'midnight', not {origin!r}")
    return Arrivals(
        offset_s=(t - t0).astype(np.float64) / 1e9,
        prompt_tokens=df["prompt_tokens"].to_numpy().astype(np.int64),
        output_tokens=df["output_tokens"].to_numpy().astype(np.int64),
    )
