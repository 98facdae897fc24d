"""The clock offset between requests and power where they do not overlap at all (request_energy's
check and the adjacent days' power it reads, pipeline/assets/request_energy.py).

Why: an energy computed where no power sample exists is not a measurement. A request whose
interval has no sample of its endpoint's GPUs gets null energies (request_energy.power_coverage
says how much of it had samples), and when none of an endpoint's requests meet its power, the
usual cause is a clock or zone mistake (an nvidia-smi log read in the wrong zone lands hours away):
the ERROR check estimates that offset so the message can say how to re-import.

- The spans where energy is measured (each workload GPU's energy curve continuous: samples at most
  2 s apart) are SQL: the macro power_runs(kind) (sql/views/power_runs.sql), which request_energy's and
  training_energy's power_coverage read.
- estimate_offset: the shift (±14 h) that best lines up requests in flight with power, by masked
  correlation on a 1 s grid (FFT), refined on the samples' own instants.
- requests_meet_power (python check, ERROR): per endpoint with requests and no coverage at all
  while its GPUs have power within ±14 h (that day or the days either side), the offset estimate.
  An endpoint that held no GPU while any of its requests ran, and whose requests no offset lines
  up with its power, is left to the power_coverage WARN: its assignments say so, not its clock.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from dagster import AssetCheckResult, AssetCheckSeverity

from pipeline.sqltext import path_literal

NS = 1_000_000_000
DAY_S = 86_400
SEARCH_S = 14 * 3600
"""The widest clock offset searched: UTC offsets run from -12:00 to +14:00."""
MIN_CORRELATION = 0.3
"""Below this, no shift lines requests up with power: the message says so instead of guessing."""
GRID_MIN_NS = 100_000_000
"""The finest grid of the search (and 1 s the coarsest): the samples' own spacing between the two."""
REFINE_MAX_SAMPLES = 200_000
"""Samples used to refine the estimate (evenly strided beyond this): the refinement stays under a second."""
ZONE_STEP_S = 15 * 60
ZONE_SLACK_S = 120
"""An offset within this of a whole quarter hour reads as a time zone mistake."""

def _xcorr(f: np.ndarray, g: np.ndarray, n: int) -> np.ndarray:
    """c[k] = sum_i f[i] g[i + k] for k = -(len(f) - 1) .. len(g) - 1, by FFT of size n."""
    full = np.fft.irfft(np.fft.rfft(g, n) * np.fft.rfft(f[::-1], n), n)
    return full[: len(f) + len(g) - 1]


def _load_at(a: np.ndarray, ft: np.ndarray, b: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Requests in flight plus requests in prefill at each instant u (ns): what power follows."""
    a, ft, b = np.sort(a), np.sort(ft), np.sort(b)
    inflight = np.searchsorted(a, u, "right") - np.searchsorted(b, u, "right")
    prefill = np.searchsorted(a, u, "right") - np.searchsorted(ft, u, "right")
    return (inflight + prefill).astype(float)


def _load_per_bin(a: np.ndarray, ft: np.ndarray, b: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """_load_at averaged over each bin between consecutive ``edges_s`` (in bins): the integral of
    a sum of boxes, from prefix sums over the sorted box ends."""
    def integral(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:  # ∫ of Σ 1[lo_i <= t < hi_i] from -inf to each edge
        out = np.zeros(len(edges_s))
        for ends, sign in ((np.sort(lo), 1.0), (np.sort(hi), -1.0)):
            c = np.searchsorted(ends, edges_s, "right")
            s = np.r_[0.0, np.cumsum(ends)]
            out += sign * (c * edges_s - s[c])
        return out
    f = integral(a, b) + integral(a, ft)
    return np.diff(f)


def estimate_offset(a_ns: np.ndarray, ft_ns: np.ndarray, b_ns: np.ndarray, t_ns: np.ndarray, w: np.ndarray,
                    search_s: int = SEARCH_S) -> dict | None:
    """The shift s (s) with request time = power time + s that best lines up the requests' load (in
    flight + in prefill) with power: masked Pearson correlation on a 1 s grid over every shift within
    ±search_s (six FFT cross-correlations), then refined around the best second on the samples' own
    instants (100 ms, then 10 ms steps; the middle of the best plateau). None without enough of
    either; else {offset_s, correlation, sample_interval_s}."""
    if len(a_ns) == 0 or len(t_ns) < 3:
        return None
    spacing = np.diff(np.sort(t_ns))
    interval_ns = int(np.median(spacing[spacing > 0])) if (spacing > 0).any() else NS
    step = int(min(max(interval_ns, GRID_MIN_NS), NS))  # the grid: the samples' spacing, 100 ms to 1 s
    # requests' grid: from the first arrival to the last end; power's: its samples' span
    r0 = (int(a_ns.min()) // step - 1) * step
    nr = int((int(b_ns.max()) - r0) // step) + 2
    edges = (r0 + np.arange(nr + 1, dtype=np.int64) * step - r0) / step
    load = _load_per_bin((a_ns - r0) / step, (ft_ns - r0) / step, (b_ns - r0) / step, edges)
    p0 = (int(t_ns.min()) // step) * step
    bins = ((t_ns - p0) // step).astype(np.int64)
    counts = np.bincount(bins)
    sums = np.bincount(bins, weights=w)
    m = (counts > 0).astype(float)
    p = np.divide(sums, counts, out=np.zeros(len(counts)), where=counts > 0)
    if m.sum() < 3 or np.ptp(load) == 0:
        return None
    win = np.ones(len(load))
    n = 1 << int(np.ceil(np.log2(len(p) + len(load))))
    c = {k: _xcorr(f, g, n) for k, (f, g) in {
        "n": (m, win), "sx": (p, win), "sxx": (p * p, win), "sy": (m, load), "syy": (m, load * load), "sxy": (p, load),
    }.items()}
    # c[k]: power bin i paired with request bin i + k - (len(p) - 1), a shift of r0 - p0 + (k - (len(p) - 1)) bins
    shift_ns = (r0 - p0) + (np.arange(len(p) + len(load) - 1, dtype=np.int64) - (len(p) - 1)) * step
    cnt = np.rint(c["n"])
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = c["sxy"] - c["sx"] * c["sy"] / cnt
        vx = c["sxx"] - c["sx"] ** 2 / cnt
        vy = c["syy"] - c["sy"] ** 2 / cnt
        r = cov / np.sqrt(vx * vy)
    inside = np.abs(shift_ns) <= search_s * NS
    if not (inside & (cnt > 0)).any():
        return None
    ok = inside & (cnt >= max(3, 0.5 * cnt[inside].max())) & (vx > 1e-6) & (vy > 1e-6)
    if not ok.any():
        return None
    r = np.where(ok, r, -np.inf)
    best_s = int(shift_ns[int(np.argmax(r))]) / NS
    # refine on the samples' own instants, near the requests
    near = (t_ns + int(best_s * NS) >= a_ns.min() - 3 * NS) & (t_ns + int(best_s * NS) <= b_ns.max() + 3 * NS)
    t, pw = t_ns[near], w[near]
    if len(t) > REFINE_MAX_SAMPLES:
        step = -(-len(t) // REFINE_MAX_SAMPLES)
        t, pw = t[::step], pw[::step]

    def corr_at(s_ns: np.ndarray) -> np.ndarray:
        out = np.full(len(s_ns), -np.inf)
        x = pw - pw.mean()
        for i, s in enumerate(s_ns):
            y = _load_at(a_ns, ft_ns, b_ns, t + int(s))
            y = y - y.mean()
            d = np.sqrt((x * x).sum() * (y * y).sum())
            if d > 0:
                out[i] = (x * y).sum() / d
        return out

    centre, best_r = int(round(best_s * NS)), float(r.max())
    for step_ns, half in ((100_000_000, 1_500_000_000), (10_000_000, 100_000_000)):
        grid = centre + np.arange(-half, half + 1, step_ns)
        rr = corr_at(grid)
        if not np.isfinite(rr.max()):
            break
        centre, best_r = int(np.median(grid[rr >= rr.max() - 1e-9])), float(rr.max())
    return {"offset_s": centre / NS, "correlation": round(best_r, 3), "sample_interval_s": interval_ns / NS}


def describe_offset(offset_s: float) -> str:
    """'power is 7 h 00 min earlier than the requests: was the log written in local time? re-import
    with --tz -07:00' (request time = power time + offset_s). The --tz hint assumes the import read
    the log as UTC; it is given only for an offset near a whole quarter hour within -12..+14 h."""
    minutes = round(abs(offset_s) / 60)
    span = f"{minutes // 60} h {minutes % 60:02d} min" if minutes else f"{abs(offset_s):.1f} s"
    text = f"power is {span} {'earlier' if offset_s > 0 else 'later'} than the requests"
    zone_s = round(offset_s / ZONE_STEP_S) * ZONE_STEP_S
    tz_s = -zone_s  # the log's zone: its wall time minus the offset is UTC
    if zone_s and abs(offset_s - zone_s) <= ZONE_SLACK_S and -12 * 3600 <= tz_s <= 14 * 3600:
        h, rem = divmod(abs(tz_s), 3600)
        text += f": was the log written in local time? re-import with --tz {'-' if tz_s < 0 else '+'}{h:02d}:{rem // 60:02d}"
    return text


def adjacent_power_files(context, warehouse, scope) -> dict:
    """inputs= hook: the usable power files of the day before and after, of this cluster-day's hosts
    (checked like the day's own), for the offset search of requests_meet_power."""
    day = dt.date.fromisoformat(scope.date)
    files: list[str] = []
    for other in (day - dt.timedelta(days=1), day + dt.timedelta(days=1)):
        files += [str(f) for f in warehouse.scoped_files(other.isoformat(), scope)["power"]]
    return {"adjacent_power_files": files}


_UNMET = """
SELECT e.endpoint, count(*) AS requests, count(*) FILTER (WHERE c.held_ns > 0) AS held_requests
FROM request_energy AS e
LEFT JOIN _coverage AS c USING (request_id, endpoint)  -- request_energy.sql's held GPU-time of each request
WHERE e.date = getvariable('partition_date')
GROUP BY ALL
HAVING max(coalesce(e.power_coverage, 0)) = 0
ORDER BY 1
"""
_REQUESTS = """
SELECT epoch_ns(prefill_start_ts) AS a, epoch_ns(first_token_ts) AS ft, epoch_ns(end_ts) AS b
FROM request_phases WHERE endpoint = $endpoint AND arrival_ts >= day_start()
"""


def _endpoint_power(con, endpoint: str, files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(t_ns, W) of the endpoint's GPUs, each sample where the endpoint held its GPU at that instant
    (gpu_assignments, not clipped to the day: the search reaches into the adjacent days' files), sorted."""
    sources = ["SELECT ts, host, gpu, power_w, power_avg_w FROM power"]
    if files:
        listed = ", ".join(path_literal(Path(f)) for f in files)
        sources.append(f"SELECT ts, host, gpu, power_w, power_avg_w FROM read_parquet([{listed}], union_by_name = true)")
    q = (f"SELECT epoch_ns(ts) AS t, coalesce(power_w, power_avg_w)::DOUBLE AS w FROM ({' UNION ALL '.join(sources)}) AS p "
         "SEMI JOIN (SELECT host, gpu, from_ns, to_ns FROM gpu_assignments WHERE kind = 'endpoint' AND name = $endpoint) AS g "
         "ON p.host = g.host AND p.gpu = g.gpu AND epoch_ns(p.ts) >= g.from_ns AND epoch_ns(p.ts) < g.to_ns "
         "WHERE coalesce(power_w, power_avg_w) IS NOT NULL ORDER BY t")
    got = con.sql(q, params={"endpoint": endpoint}).fetchnumpy()
    return np.asarray(got["t"], np.int64), np.asarray(got["w"], float)


def requests_meet_power(con, adjacent_power_files: list[str] | None = None, **_) -> AssetCheckResult:
    """ERROR where an endpoint's requests and its GPUs' power do not overlap at all although its GPUs
    have power within ±14 h: energies of a whole endpoint would be missing for a clock or zone
    mistake, so the message gives the offset estimate (estimate_offset) and the --tz to re-import with."""
    unmet = con.execute(_UNMET).fetchall()
    found: dict[str, dict] = {}
    lines = []
    for endpoint, n_requests, held_requests in unmet:
        req = con.sql(_REQUESTS, params={"endpoint": endpoint}).fetchnumpy()
        a, ft, b = (np.asarray(req[c], np.int64) for c in ("a", "ft", "b"))
        t, w = _endpoint_power(con, endpoint, adjacent_power_files or [])
        if len(a):
            inside = (t >= a.min() - SEARCH_S * NS) & (t <= b.max() + SEARCH_S * NS)
            t, w = t[inside], w[inside]
        if not len(t):
            continue  # no power at all near these requests: incomplete (power_coverage WARNs), not wrong
        est = estimate_offset(a, ft, b, t, w)
        unaligned = est is None or est["correlation"] < MIN_CORRELATION
        if unaligned and held_requests == 0:
            continue  # it held no GPU while they ran (an assignment, not a clock): power_coverage WARNs
        if unaligned:
            text = f"endpoint {endpoint}: none of its {n_requests} requests overlaps its GPUs' power, and no clock offset within ±14 h lines them up"
        else:
            text = f"endpoint {endpoint}: {describe_offset(est['offset_s'])}"
        found[endpoint] = {"requests": n_requests, **(est or {})}
        lines.append(text)
    return AssetCheckResult(
        check_name="requests_meet_power",
        passed=not found,
        severity=AssetCheckSeverity.ERROR,
        metadata={"endpoints": len(found), "estimates": str(found)},
        description=("; ".join(lines) + " (their energies are null)") if found else None,
    )
