"""Request timestamps → UTC epoch nanoseconds, one rule for the per-line and the vectorised path.

Accepted forms:

* RFC 3339 strings with an explicit offset: ``2026-12-02T13:05:00.123456789Z``, ``...+02:00``
  (a space or ``T`` between date and time; up to 9 fractional digits are kept, more are cut).
  A string without an offset is rejected: guessing a zone is how clocks end up skewed by hours.
* JSON numbers since the Unix epoch, unit told apart by magnitude (for any date between 1973 and
  2262 the four ranges cannot be confused):

  ========================  ============
  value                     unit
  ========================  ============
  ``< 1e11``                seconds
  ``1e11 <= v < 1e14``      milliseconds
  ``1e14 <= v < 1e17``      microseconds
  ``>= 1e17``               nanoseconds
  ========================  ============

Negative, non-finite and out-of-range (past year 2262, the end of int64 ns) values are errors.
"""

from __future__ import annotations

import datetime as dt
import math
import re

import polars as pl

RFC3339 = r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
_RFC3339_RE = re.compile(RFC3339)
_EPOCH = dt.datetime(1970, 1, 1)
_NS_MAX = 2**63 - 1

# (upper bound of the magnitude, ns per unit), in order.
EPOCH_UNITS = ((1e11, 1_000_000_000), (1e14, 1_000_000), (1e17, 1_000), (math.inf, 1))


class BadTimestamp(ValueError):
    """Why a value is not a timestamp; the message becomes the quarantine reason."""


def epoch_to_ns(value: int | float) -> int:
    """Epoch seconds/ms/µs/ns (by magnitude) to integer ns, exact for integers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadTimestamp(f"expected a number or an RFC 3339 string, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadTimestamp("not a finite number")
    if value < 0:
        raise BadTimestamp("negative epoch value")
    mult = next(m for bound, m in EPOCH_UNITS if value < bound)
    if isinstance(value, int):
        ns = value * mult
    else:
        whole = math.floor(value)
        # floor(x + 0.5), not round(): the same IEEE operations as the vectorised path.
        ns = whole * mult + math.floor((value - whole) * mult + 0.5)
    if ns > _NS_MAX:
        raise BadTimestamp("beyond year 2262")
    return ns


def rfc3339_to_ns(text: str) -> int:
    m = _RFC3339_RE.match(text)
    if not m:
        raise BadTimestamp("not an RFC 3339 timestamp with a UTC offset (e.g. 2026-12-02T13:05:00.123Z)")
    y, mo, d, h, mi, s, frac, off = m.groups()
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
    except ValueError as exc:
        raise BadTimestamp(f"invalid date or time ({exc})") from None
    ns = (when - _EPOCH) // dt.timedelta(microseconds=1) * 1000
    if frac:
        ns += int(frac[:9].ljust(9, "0"))
    if off not in ("Z", "z"):
        sign = 1 if off[0] == "+" else -1
        ns -= sign * (int(off[1:3]) * 3600 + int(off[4:6]) * 60) * 1_000_000_000
    if not 0 <= ns <= _NS_MAX:
        raise BadTimestamp("outside 1970..2262")
    return ns


def utc_day(ns: int) -> str:
    """``YYYY-MM-DD`` of an epoch-ns instant: the partition a row (or a rejected line) belongs to."""
    return (_EPOCH + dt.timedelta(microseconds=ns // 1000)).date().isoformat()


def to_ns(value) -> int:
    """A JSON value (str or number) to epoch ns, or :class:`BadTimestamp`."""
    if isinstance(value, str):
        return rfc3339_to_ns(value)
    return epoch_to_ns(value)


# ---- vectorised (polars) twins: null where the value is not clean; such rows take the per-line path.


def epoch_expr(col: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """Epoch numbers → Int64 ns by the magnitude rule; null for anything the scalar path might treat differently."""
    if not (dtype.is_integer() or dtype.is_float()):
        return pl.lit(None, pl.Int64)
    is_int = dtype.is_integer()
    v = col.cast(pl.Int64 if is_int else pl.Float64)
    whole = v if is_int else v.floor()
    # A float past 2**53 is not an exact integer any more: let the per-line path decide.
    out = pl.when((v < 0) if is_int else (~v.is_finite() | (v < 0) | (v >= 2.0**53))).then(None)
    lower = 0
    for bound, mult in EPOCH_UNITS:
        in_unit = v >= lower if not math.isfinite(bound) else (v >= lower) & (v < bound)
        scaled = whole.cast(pl.Int64) * mult
        if not is_int:
            scaled = scaled + ((v - whole) * mult + 0.5).floor().cast(pl.Int64)
        fits = whole <= (_NS_MAX // mult) - 1  # headroom for the rounded fraction; the edge goes per-line
        out = out.when(in_unit & fits).then(scaled).when(in_unit).then(None)
        lower = bound
    return out.otherwise(None)


def rfc3339_expr(col: pl.Expr) -> pl.Expr:
    """RFC 3339 strings → Int64 ns; null when the fast parser cannot (then the per-line parser decides)."""
    normal = (
        col.str.replace(r"^(\d{4}-\d{2}-\d{2})[t ]", "${1}T")
        .str.replace(r"[Zz]$", "+00:00")
        # chrono's %.f takes at most 9 digits: longer fractions go per-line
    )
    parsed = normal.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="ns", time_zone="UTC", strict=False)
    ok = col.str.contains(RFC3339) & ~col.str.contains(r"\.\d{10,}")
    return pl.when(ok).then(parsed.dt.epoch("ns")).otherwise(None)


def column_to_ns(name: str, dtype: pl.DataType | None) -> pl.Expr:
    """The ns expression for one JSON column of any dtype polars inferred."""
    if dtype is None or dtype == pl.Null:
        return pl.lit(None, pl.Int64)
    if dtype == pl.String:
        return rfc3339_expr(pl.col(name))
    return epoch_expr(pl.col(name), dtype)
