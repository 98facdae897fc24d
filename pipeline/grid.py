"""Host-and-above power on a grid of any step (the ``grid_step_ms`` setting), and its swing statistics.

At the default step (100 ms) ``fleet_power_100ms`` is that grid and none of this runs: the default
costs nothing. At another step (20 ms resolves the tens-of-ms prefills of continuous batching)
the 100 ms charting products stay as they are, and each GPU's value in a bin is its *exact mean
power* over the bin from its energy curve: (E(b) − E(a)) ÷ step, the power linear between samples.
A mean of the samples inside each bin would leave most 20 ms bins of a ~50 Hz buffer empty or
resting on one sample; the curve covers every bin between two linked samples. A bin is complete
for a GPU when every sample interval inside it is linked (no gap > 2 s, no stretch whose best
source is only a 1 s average); a host's bin when every GPU of the host that reports that day
covers it; a cluster's, role's or fleet's when every such host's is complete (as in
``fleet_power_100ms``). One GPU's samples are in memory at a time, plus one dense day array per
host, cluster, role and fleet.

The swing statistics are swing_stats' on the grid (its SQL oracle: tests/oracles/swing_stats.sql):
sliding windows of ``W / step`` consecutive complete bins (exact on the grid: ``rolling_max`` /
``rolling_min`` over a dense day series whose incomplete bins are null), aligned windows for
p50/p99 and the counts, the largest step between consecutive complete bins for the ramp.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from pipeline.phases.curve import RUN, Curve, curves
from pipeline.series.cache import CurveCache

DAY_NS = 86_400 * 1_000_000_000
LEVELS_ABOVE_HOST = ("cluster", "role", "fleet")


def bin_means(
    t_ns: np.ndarray, energy_j: np.ndarray, power_w: np.ndarray, next_t_ns: np.ndarray, next_w: np.ndarray,
    day_start_ns: int, step_ns: int, bins: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One GPU's mean power in each bin ``[day_start + k step, day_start + (k + 1) step)`` of the day,
    whether its samples cover the bin, and how many bins before and after it lie the samples its
    value is drawn from (``behind``: the sample at or before the bin's start; ``ahead``: the one at
    or after its end; 0 when on the edge or inside the bin): the carry rule's ``carried`` of a grid
    whose step is finer than the sampling, so a window can leave out a bin whose value leans on a
    sample outside it. Inputs: its energy curve's rows (instantaneous ones only), sorted by time;
    ``next_t_ns`` is -1 where the curve has none (a gap or the end).

    E at an edge is the curve's energy at the sample at or before it plus the trapezoid to the
    edge (the power linear to the next sample): exact for the piecewise-linear power."""
    values = np.zeros(bins)
    ok = np.zeros(bins, dtype=bool)
    behind = np.zeros(bins, dtype=np.int64)
    ahead = np.zeros(bins, dtype=np.int64)
    n = len(t_ns)
    if n < 2:
        return values, ok, behind, ahead
    # a segment is linked when the curve links it to the very next row here (a row left out as a
    # 1 s average breaks the link)
    linked = np.zeros(n, dtype=bool)
    linked[:-1] = next_t_ns[:-1] == t_ns[1:]
    run = np.concatenate(([0], np.cumsum(~linked[:-1])))
    lo = max(0, (int(t_ns[0]) - day_start_ns) // step_ns)
    hi = min(bins, -(-(int(t_ns[-1]) - day_start_ns) // step_ns))
    if hi <= lo:
        return values, ok, behind, ahead
    edges = day_start_ns + np.arange(lo, hi + 1, dtype=np.int64) * step_ns
    at = np.searchsorted(t_ns, edges, side="right") - 1  # the sample at or before each edge
    before = np.searchsorted(t_ns, edges, side="left") - 1  # the last sample strictly before it
    a = np.clip(at, 0, n - 1)
    dt = (edges - t_ns[a]).astype(np.float64)
    seg = np.where(linked[a], (next_t_ns[a] - t_ns[a]).astype(np.float64), 1.0)
    p0 = power_w[a]
    p_edge = p0 + (next_w[a] - p0) * dt / seg
    energy = energy_j[a] + np.where(linked[a], dt / 1e9 * (p0 + p_edge) / 2, 0.0)
    b = np.clip(before[1:], 0, n - 1)
    covered = (at[:-1] >= 0) & linked[a[:-1]] & (before[1:] >= 0) & linked[b] & (run[a[:-1]] == run[b])
    ok[lo:hi] = covered
    values[lo:hi] = np.where(covered, np.diff(energy) / (step_ns / 1e9), 0.0)
    after = np.clip(np.searchsorted(t_ns, edges[1:], side="left"), 0, n - 1)  # the sample at or after each bin's end
    behind[lo:hi] = np.where(covered, -((t_ns[a[:-1]] - edges[:-1]) // step_ns), 0)  # ceil((start − sample) / step)
    ahead[lo:hi] = np.where(covered, -((edges[1:] - t_ns[after]) // step_ns), 0)
    return values, ok, behind, ahead


@dataclass
class Series:
    """A dense day series of one entity: the summed power per bin, members complete per bin, members."""

    level: str
    entity: str
    power_w: np.ndarray
    complete_members: np.ndarray
    members: int
    behind: np.ndarray | None = None
    """Per bin, the most bins back any member's value leans on a sample (bin_means), and ahead."""
    ahead: np.ndarray | None = None

    def lean(self, behind: np.ndarray, ahead: np.ndarray, where: np.ndarray) -> None:
        """Widen the series' reach to a member's where it is ``ok``."""
        if self.behind is None or self.ahead is None:
            self.behind, self.ahead = np.zeros(len(self.power_w), np.int64), np.zeros(len(self.power_w), np.int64)
        self.behind = np.where(where, np.maximum(self.behind, behind), self.behind)
        self.ahead = np.where(where, np.maximum(self.ahead, ahead), self.ahead)

    @property
    def ok(self) -> np.ndarray:
        return self.complete_members == self.members


def series_frame(s: Series, gpus_reporting: np.ndarray, step_ms: int) -> pl.DataFrame:
    """The bins where any member covers: bin, power_w (the partial sum where incomplete), gpus_reporting,
    complete, carried_ms / ahead_ms (how far before and after the bin lie the samples it leans on)."""
    keep = np.flatnonzero(gpus_reporting > 0)
    zero = np.zeros(len(s.power_w), np.int64)
    behind = s.behind if s.behind is not None else zero
    ahead = s.ahead if s.ahead is not None else zero
    return pl.DataFrame({
        "level": pl.Series([s.level] * len(keep), dtype=pl.Utf8),
        "entity": pl.Series([s.entity] * len(keep), dtype=pl.Utf8),
        "bin": keep.astype(np.int64),
        "power_w": s.power_w[keep],
        "gpus_reporting": gpus_reporting[keep].astype(np.int32),
        "complete": s.ok[keep],
        "carried_ms": (behind[keep] * step_ms).astype(np.int32),
        "ahead_ms": (ahead[keep] * step_ms).astype(np.int32),
    })


def gpu_curve(c: Curve) -> dict[str, np.ndarray]:
    """One GPU's instantaneous curve rows as arrays, by time: its energy curve rebuilt from its raw
    samples (pipeline/phases/curve.curve_of), rows of 1 s averages left out; ``next_t_ns`` -1
    and ``next_w`` 0 where a row has no next sample (a gap or the end)."""
    keep = ~c.is_average
    return {
        "t_ns": c.t_ns[keep],
        "power_w": c.power_w[keep],
        "energy_j": c.energy_j[keep],
        "next_t_ns": np.where(c.has_next, c.next_t_ns, -1)[keep],
        "next_w": np.where(c.has_next, c.next_w, 0.0)[keep],
    }


def summed_series(con, step_ms: int, cache: CurveCache | None | Literal["run"] = RUN) -> Iterator[pl.DataFrame]:
    """The cluster-day's host, cluster, role and fleet series on the grid, one frame per host and
    then one per upper entity (rows as :func:`series_frame`), from each GPU's energy curve
    (``cache``: as pipeline/phases/curve.py's readers take it)."""
    day_start_ns = con.execute("SELECT epoch_ns(day_start())").fetchone()[0]
    step_ns = step_ms * 1_000_000
    bins = DAY_NS // step_ns
    gpus = con.execute(
        """SELECT i.host, i.gpu::BIGINT, i.cluster, i.role, i.fleet
           FROM (SELECT DISTINCT host, gpu FROM energy_curve WHERE date = getvariable('partition_date')) AS r
           JOIN inventory_gpus AS i USING (host, gpu) ORDER BY 1, 2"""
    ).fetchall()
    hosts: dict[str, list[int]] = {}
    upper_of: dict[str, tuple[str, str, str]] = {}
    for host, gpu, cluster, role, fleet in gpus:
        hosts.setdefault(host, []).append(gpu)
        upper_of[host] = (cluster, role, fleet)
    upper: dict[tuple[str, str], Series] = {}
    upper_gpus: dict[tuple[str, str], np.ndarray] = {}
    for host in hosts:
        for level, entity in zip(LEVELS_ABOVE_HOST, upper_of[host], strict=True):
            if (level, entity) not in upper:
                upper[(level, entity)] = Series(level, entity, np.zeros(bins), np.zeros(bins, dtype=np.int32), 0)
                upper_gpus[(level, entity)] = np.zeros(bins, dtype=np.int32)
            upper[(level, entity)].members += 1
    for host, members in hosts.items():
        total = Series("host", host, np.zeros(bins), np.zeros(bins, dtype=np.int32), len(members))
        for _, _, c in curves(con, [(host, gpu) for gpu in members], cache=cache):  # the host read once, one GPU in memory
            g = gpu_curve(c)
            values, ok, behind, ahead = bin_means(g["t_ns"], g["energy_j"], g["power_w"], g["next_t_ns"], g["next_w"],
                                                  day_start_ns, step_ns, bins)
            total.power_w += values
            total.complete_members += ok
            total.lean(behind, ahead, ok)
        gpus_reporting = total.complete_members.copy()
        yield series_frame(total, gpus_reporting, step_ms)
        host_ok = total.ok
        for level, entity in zip(LEVELS_ABOVE_HOST, upper_of[host], strict=True):
            u = upper[(level, entity)]
            u.power_w += total.power_w
            u.complete_members += host_ok
            assert total.behind is not None and total.ahead is not None
            u.lean(total.behind, total.ahead, host_ok)
            upper_gpus[(level, entity)] += gpus_reporting
    for key, u in upper.items():
        yield series_frame(u, upper_gpus[key], step_ms)


def grid_stats(values: np.ndarray, ok: np.ndarray, step_ms: int, windows_s: Iterable[int], provisioned_w: float,
               slide: bool = True, carried: np.ndarray | None = None, ahead: np.ndarray | None = None) -> list[dict]:
    """swing_stats' columns for one entity's series on the grid, one dict per window (none when no
    bin is complete); max_swing_w None unless ``slide`` (a GPU's comes from its raw samples).

    ``carried``: per bin, how many bins back its oldest value was sampled (0: in the bin; the carry
    rule of sparse sources). A window leaves out a bin whose value was sampled before the window
    starts, so carrying never widens a window: a one-GPU host swings at most what its GPU's samples
    do within the window. ``ahead``: per bin, how many bins after it lies a sample its value leans
    on (a grid finer than the sampling interpolates toward the next sample); a window leaves out a
    bin leaning on a sample after it ends, likewise."""
    return window_rows(grid_windows(values, ok, step_ms, windows_s, slide, carried, ahead), provisioned_w)


@dataclass
class Windows:
    """One series' statistics over one window length, before the entity's provisioned power is
    known: what grid_stats reports, with the aligned complete windows' swings (``ranges``) from
    which the counts over 10 % / 25 % of any provisioned power follow."""

    window_s: int
    max_swing_w: float | None
    ranges: np.ndarray
    max_ramp_w_per_s: float | None
    windows_complete: int
    windows_incomplete: int


def _quantiles(ranges: np.ndarray) -> tuple[float | None, float | None]:
    """The 0.5 and 0.99 quantiles (linear) of the ranges, from one partition (the same values as
    one np.quantile each), None for none."""
    if not len(ranges):
        return None, None
    p50, p99 = np.quantile(ranges, [0.5, 0.99])
    return float(p50), float(p99)


def window_rows(windows: list[Windows], provisioned_w: float) -> list[dict]:
    """grid_stats' dicts of a series' :class:`Windows`, for an entity of ``provisioned_w``."""
    return [{
        "window_s": w.window_s,
        "max_swing_w": w.max_swing_w,
        **dict(zip(("p50_swing_w", "p99_swing_w"), _quantiles(w.ranges), strict=True)),
        "max_ramp_w_per_s": w.max_ramp_w_per_s,
        "windows_over_10pct": int((w.ranges > 0.10 * provisioned_w).sum()),
        "windows_over_25pct": int((w.ranges > 0.25 * provisioned_w).sum()),
        "windows_complete": w.windows_complete,
        "windows_incomplete": w.windows_incomplete,
    } for w in windows]


def grid_windows(values: np.ndarray, ok: np.ndarray, step_ms: int, windows_s: Iterable[int], slide: bool = True,
                 carried: np.ndarray | None = None, ahead: np.ndarray | None = None) -> list[Windows]:
    """grid_stats of a series without its entity: one :class:`Windows` per window length (none when
    no bin is complete). Arguments as grid_stats'."""
    if not ok.any():
        return []
    both = ok[1:] & ok[:-1]
    ramp = float(np.abs(np.diff(values))[both].max()) / (step_ms / 1000) if both.any() else None
    if carried is None and ahead is not None:
        carried = np.zeros(len(values), np.int64)
    aged = carried is not None and (bool((carried[ok] > 0).any()) or (ahead is not None and bool((ahead[ok] > 0).any())))
    windows_s = list(windows_s)
    aligned = None if slide else AlignedBlocks(values, ok, carried if aged else None, ahead if aged else None,
                                               [w * 1000 // step_ms for w in windows_s])
    out = []
    for w in windows_s:
        n = w * 1000 // step_ms
        if aligned is not None:  # the aligned windows only (window_extremes at starts 0, n, 2n, ...), every length from one pass
            hi, lo, count = aligned.extremes(n)
            complete = count == n
            ranges = np.where(hi >= lo, hi - lo, 0.0)[complete]
            out.append(Windows(window_s=w, max_swing_w=None, ranges=ranges, max_ramp_w_per_s=ramp,
                               windows_complete=int(complete.sum()), windows_incomplete=int(((count > 0) & ~complete).sum())))
            continue
        if aged and slide:
            assert carried is not None
            hi, lo, full = window_extremes(values, ok, carried, n, ahead)
            swing = np.where(hi >= lo, hi - lo, 0.0)  # no value sampled inside: nothing seen to swing
            sliding = float(swing[full].max()) if full.any() else None
            complete = full[::n]
            ranges = swing[::n][complete]
            blocks = ok.reshape(-1, n)
        else:
            sliding = sliding_max_swing(values, ok, n)
            blocks = ok.reshape(-1, n)
            complete = np.asarray(blocks.all(axis=1))
            used = values.reshape(-1, n)[complete]
            ranges = used.max(axis=1) - used.min(axis=1) if len(used) else np.zeros(0)
        out.append(Windows(window_s=w, max_swing_w=sliding, ranges=ranges, max_ramp_w_per_s=ramp,
                           windows_complete=int(complete.sum()), windows_incomplete=int((blocks.any(axis=1) & ~complete).sum())))
    return out


def grid_max_swing(values: np.ndarray, ok: np.ndarray, n: int, carried: np.ndarray | None = None) -> float | None:
    """The largest swing over every window of ``n`` consecutive ``ok`` bins (None when there is
    none), leaving out of each window the values carried from before it (``carried``, as in
    :func:`grid_stats`)."""
    if carried is None or not bool((carried[ok] > 0).any()):
        return sliding_max_swing(values, ok, n)
    hi, lo, full = window_extremes(values, ok, carried, n)
    return float(np.where(hi >= lo, hi - lo, 0.0)[full].max()) if full.any() else None


def window_extremes(values: np.ndarray, ok: np.ndarray, carried: np.ndarray, n: int,
                    ahead: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every window of ``n`` bins starting at bin s (s = 0 … len − n): the max and min of the
    values it uses (−inf/+inf when none) and whether all its bins are ``ok``. A window uses bin
    s + d unless its value was carried from before s (``carried[s + d] > d``) or leans on a sample
    after its end (``ahead[s + d] > n − 1 − d``). Exact, one pass per offset d within the largest
    reach of either (a few for 250 ms and 1 s sources); the middle of the window, which no value
    reaches out of, by polars rolling max/min. Only the windows holding an ``ok`` bin are worked
    out (the others use nothing: −inf/+inf, not full): a host on a 20 ms grid that reported for an
    hour of its day costs that hour's bins, not the day's 4.3 M per pass."""
    bins = len(values)
    starts = bins - n + 1
    held = np.flatnonzero(ok)
    if len(held) and (held[0] >= n or held[-1] < starts - 1):
        first, end = max(0, int(held[0]) - n + 1), min(bins, int(held[-1]) + n)  # bins of the windows that start in [first, end - n]
        part = window_extremes(values[first:end], ok[first:end], carried[first:end], n,
                               None if ahead is None else ahead[first:end])
        hi, lo, full = np.full(starts, -np.inf), np.full(starts, np.inf), np.zeros(starts, bool)
        for whole, sub in ((hi, part[0]), (lo, part[1]), (full, part[2])):
            whole[first: first + len(sub)] = sub
        return hi, lo, full
    if ahead is None:
        ahead = np.zeros(bins, np.int64)
    reach = int(min(n, carried[ok].max(initial=0)))
    forward = int(min(n - reach, ahead[ok].max(initial=0)))
    hi = np.full(starts, -np.inf)
    lo = np.full(starts, np.inf)
    for d in [*range(reach), *range(n - forward, n)]:  # a window's first and last bins: used when they lean on nothing outside it
        use = ok[d: d + starts] & (carried[d: d + starts] <= d) & (ahead[d: d + starts] <= n - 1 - d)
        v = values[d: d + starts]
        hi = np.where(use, np.maximum(hi, v), hi)
        lo = np.where(use, np.minimum(lo, v), lo)
    if reach + forward < n:  # bins reach … n − forward − 1 of every window: always used where ok
        middle = pl.Series("v", np.where(ok, values, np.nan), nan_to_null=True)
        m = n - reach - forward  # the m bins ending at s + n − forward − 1
        t_hi = middle.rolling_max(window_size=m, min_samples=1).to_numpy()[n - forward - 1: n - forward - 1 + starts]
        t_lo = middle.rolling_min(window_size=m, min_samples=1).to_numpy()[n - forward - 1: n - forward - 1 + starts]
        hi = np.fmax(hi, np.nan_to_num(t_hi, nan=-np.inf))
        lo = np.fmin(lo, np.nan_to_num(t_lo, nan=np.inf))
    filled = np.r_[0, np.cumsum(ok, dtype=np.int64)]
    count = filled[n:] - filled[:-n]
    return hi, lo, count == n


def aligned_extremes(values: np.ndarray, ok: np.ndarray, carried: np.ndarray, n: int,
                     ahead: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`window_extremes` of the aligned windows only (starts 0, n, 2n, …; ``len(values)`` a
    multiple of ``n``), the same values: what grid_stats needs when it does not slide (a GPU's
    max swing comes from its raw samples). One pass over the day's bins instead of one per start
    and offset: a GPU's day at 100 ms took ~0.1 s a window the sliding way."""
    d = np.arange(n)
    okb = ok.reshape(-1, n)
    use = okb & (carried.reshape(-1, n) <= d)
    if ahead is not None:
        use &= ahead.reshape(-1, n) <= n - 1 - d
    v = values.reshape(-1, n)
    return np.where(use, v, -np.inf).max(axis=1), np.where(use, v, np.inf).min(axis=1), np.asarray(okb.all(axis=1))


class AlignedBlocks:
    """:func:`aligned_extremes` of a series for several window lengths (multiples of one unit, the
    lengths' common divisor), from one pass over the day's bins: per unit block the extremes of
    the ok bins that lean on nothing (no ``carried``, no ``ahead``: every window holding them uses
    them) and the count of ok bins; a window's are its blocks' extremes and counts, widened by
    the few bins that lean (used where their offset in the window allows it, as aligned_extremes
    says). The same values: max and min do not depend on the order they are taken in. Why: a GPU's
    grid columns took a pass over the day per window length (four), with a reduction over short
    rows each (~0.14 s a GPU-day at 100 ms)."""

    def __init__(self, values: np.ndarray, ok: np.ndarray, carried: np.ndarray | None, ahead: np.ndarray | None,
                 lengths: Iterable[int]) -> None:
        self.unit = unit = int(np.gcd.reduce(np.asarray(list(lengths), np.int64)))
        plain = ok.copy()
        if carried is not None:
            plain &= carried == 0
        if ahead is not None:
            plain &= ahead == 0
        self.hi = np.where(plain, values, -np.inf).reshape(-1, unit).max(axis=1)
        self.lo = np.where(plain, values, np.inf).reshape(-1, unit).min(axis=1)
        self.count = ok.reshape(-1, unit).sum(axis=1, dtype=np.int64)
        self.leaning = np.flatnonzero(ok & ~plain)
        self.value = values[self.leaning]
        self.carried = carried[self.leaning] if carried is not None else np.zeros(len(self.leaning), np.int64)
        self.ahead = ahead[self.leaning] if ahead is not None else np.zeros(len(self.leaning), np.int64)

    def extremes(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The aligned windows of ``n`` bins (a multiple of the unit): the max and min of the values
        each uses (−inf/+inf when none) and its count of ok bins (n: complete)."""
        k = n // self.unit
        hi = self.hi.reshape(-1, k).max(axis=1)
        lo = self.lo.reshape(-1, k).min(axis=1)
        count = self.count.reshape(-1, k).sum(axis=1)
        d = self.leaning % n
        use = (self.carried <= d) & (self.ahead <= n - 1 - d)
        at = self.leaning[use] // n
        np.maximum.at(hi, at, self.value[use])
        np.minimum.at(lo, at, self.value[use])
        return hi, lo, count


def sliding_max_swing(values: np.ndarray, ok: np.ndarray, n: int) -> float | None:
    """The largest max − min over every window of ``n`` consecutive bins that are all ``ok`` (None
    when there is none); ``len(values)`` a multiple of ``n``.

    Exact, and cheap on a day series: aligned n-bin blocks first (reshape); a window starting in
    block k lies inside blocks k and k + 1, so it can beat the best complete block only if the
    pair's joint range does; only those pairs are slid (polars rolling max/min), laid end to end
    with a null between pairs that do not touch, so no window reaches from one into another."""
    blocks = len(values) // n
    hi = np.where(ok, values, -np.inf).reshape(blocks, n).max(axis=1)
    lo = np.where(ok, values, np.inf).reshape(blocks, n).min(axis=1)
    count = ok.reshape(blocks, n).sum(axis=1)
    complete = count == n
    best = float((hi - lo)[complete].max()) if complete.any() else None
    pair = np.maximum(hi[1:], hi[:-1]) - np.minimum(lo[1:], lo[:-1])
    can = (count[1:] + count[:-1] >= n) & (pair > (-np.inf if best is None else best))
    if not can.any():
        return best
    mark = np.zeros(blocks, dtype=bool)
    mark[np.flatnonzero(can)] = True
    mark[np.flatnonzero(can) + 1] = True
    starts = np.flatnonzero(mark & ~np.r_[False, mark[:-1]])  # runs of marked blocks
    ends = np.flatnonzero(mark & ~np.r_[mark[1:], False]) + 1
    pieces = []
    for a, b in zip(starts, ends, strict=True):
        pieces += [np.where(ok[a * n: b * n], values[a * n: b * n], np.nan), np.array([np.nan])]
    series = pl.Series("v", np.concatenate(pieces), nan_to_null=True)
    slid = (series.rolling_max(window_size=n, min_samples=n) - series.rolling_min(window_size=n, min_samples=n)).max()
    if slid is None:
        return best
    return float(slid) if best is None else max(best, float(slid))  # type: ignore[arg-type]


SLOTS_PER_MINUTE = 600


def carried_slots(slot: np.ndarray, end_slot: int) -> tuple[np.ndarray, np.ndarray]:
    """One GPU's empty 100 ms slots that take an earlier slot's value, and that slot's row: the
    carry rule of sql/views/power_series.sql (gpu_grid_carried), step for step. Only minutes with
    an empty slot ("gappy") and the minute before each are looked at; a row carries its value
    into the empty slots after it, at most to the next such row and at most ``reach`` slots (the
    0.9 discrete quantile of the row spacing in its minute, less one, at least one); only slots in
    gappy minutes before ``end_slot`` are kept. ``slot``: the GPU's slots of the day, sorted, unique."""
    none = np.zeros(0, np.int64)
    if not len(slot):
        return none, none
    minute = slot // SLOTS_PER_MINUTE
    first = np.flatnonzero(np.r_[True, minute[1:] != minute[:-1]])  # slot is sorted: each minute's rows are a run
    minutes, counts = minute[first], np.diff(np.r_[first, len(minute)])
    gappy = minutes[counts < SLOTS_PER_MINUTE]
    if not len(gappy):
        return none, none
    rows = np.flatnonzero(np.isin(minute, np.union1d(gappy, gappy - 1)))
    s, m = slot[rows], minute[rows]
    has_next = np.r_[np.ones(len(s) - 1, bool), False]
    spacing = np.r_[s[1:] - s[:-1], 0]
    # reach per minute: quantile_disc(spacing, 0.9) over its rows that have a next row
    reach = np.ones(len(s), np.int64)  # a minute without such rows: 1
    order = np.lexsort((spacing[has_next], m[has_next]))
    ms, sp = m[has_next][order], spacing[has_next][order]
    if len(ms):
        first = np.flatnonzero(np.r_[True, ms[1:] != ms[:-1]])
        n = np.diff(np.r_[first, len(ms)])
        keys = ms[first]
        values = np.maximum(1, sp[first + np.maximum(1, np.ceil(n * 0.9)).astype(np.int64) - 1] - 1)  # DuckDB: element ⌈n q⌉
        at = np.searchsorted(keys, m).clip(max=len(keys) - 1)
        hit = keys[at] == m
        reach[hit] = values[at[hit]]
    carries = ~has_next | (spacing > 1)
    take = np.minimum(np.where(has_next, spacing - 1, 1), reach)[carries]
    src = rows[carries]
    out_src = np.repeat(src, take)
    out = np.repeat(slot[src], take) + (np.arange(len(out_src)) - np.repeat(np.cumsum(take) - take, take)) + 1
    keep = np.isin(out // SLOTS_PER_MINUTE, gappy) & (out < end_slot)
    return out[keep], out_src[keep]
