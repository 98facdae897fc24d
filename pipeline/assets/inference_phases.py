"""Inference phases: `phase_intervals` (the exact timeline, in event time: intervals between
consecutive request events), `phase_segments` (runs of one label, from the request log in event
time and from power alone: the detector of pipeline/phases/power_detect.py on each GPU's own
samples) and `phase_timeline` (the 100 ms grid, derived: charts, the power-only label per slot, the
clock-skew check)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np
import polars as pl
import pyarrow as pa
from dagster import MetadataValue

from pipeline import kernels
from pipeline.kernels import arrow_frame, registered
from pipeline.phases import checks, curve, power_detect
from pipeline.series.cache import CurveCache
from pipeline.series_run import run_curves
from pipeline.tables import PythonCheck, Table, TableRun, table_assets

BATCH_ROWS = 65_536
"""Rows per batch a chunk's shaping query hands to the part's write."""

TIMELINE_STATE_SQL = """
-- one endpoint's ($endpoint) request state per 100 ms slot, from its exact timeline (phase_intervals):
-- one row per slot some busy interval touches (the others: idle, no tokens). Each busy interval
-- [start_ns, end_ns) touches slots start_ns // 100 ms to (end_ns − 1) // 100 ms; per slot: the label of
-- the busiest interval touching it (2 prefill > 1 decode: the any-overlap rule), the most requests in
-- each phase at once, and the tokens of each interval in proportion to its overlap with the slot
-- (each request's tokens spread evenly over its phase interval).
WITH iv AS (
    SELECT start_ns, end_ns, CASE phase WHEN 'prefill' THEN 2 ELSE 1 END AS ph, n_prefill, n_decode,
           prefill_estimated, prompt_tokens_per_s, output_tokens_per_s,
           unnest(range(start_ns // 100000000, (end_ns - 1) // 100000000 + 1)) AS slot
    FROM phase_intervals
    WHERE date = getvariable('partition_date') AND endpoint = $endpoint AND phase <> 'idle'
)
SELECT slot,
       coalesce(max(n_prefill), 0)::INTEGER AS n_prefill,
       coalesce(max(n_decode), 0)::INTEGER AS n_decode,
       coalesce(bool_or(prefill_estimated), false) AS prefill_estimated,
       coalesce(xsum(prompt_tokens_per_s * (least(end_ns, (slot + 1) * 100000000) - greatest(start_ns, slot * 100000000)) / 1e9), 0) AS prompt_tokens,
       coalesce(xsum(output_tokens_per_s * (least(end_ns, (slot + 1) * 100000000) - greatest(start_ns, slot * 100000000)) / 1e9), 0) AS output_tokens,
       coalesce(max(ph), 0)::INTEGER AS ph
FROM iv GROUP BY slot
ORDER BY slot
"""
_TIMELINE_POWER = """
SELECT epoch_us(ts) // 100000 AS slot, power_w::DOUBLE AS power_w FROM power_100ms
WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu AND power_w IS NOT NULL
"""
_TIMELINE_POWER_RUNS = """
-- the GPU's power-only runs while the endpoint held it (phase_segments' 'power' rows: the detector at
-- native resolution); a run [start, end) overlaps slots start // 100 ms to (end − 1) // 100 ms
SELECT epoch_us(start_ts) // 100000 AS first, (epoch_us(end_ts) - 1) // 100000 AS last,
       CASE phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 ELSE 2 END AS ph
FROM phase_segments
WHERE date = getvariable('partition_date') AND source = 'power' AND endpoint = $endpoint AND host = $host AND gpu = $gpu
  AND start_ts IS NOT NULL AND end_ts IS NOT NULL
"""
_LABELS = pa.array(["idle", "decode", "prefill"], pa.string())
_DICT = pa.dictionary(pa.int32(), pa.string())  # strings dictionary-encoded in the stream (stored as VARCHAR)
TIMELINE_TABLE_SCHEMA = pa.schema([
    ("date", pa.date32()), ("endpoint", _DICT), ("host", _DICT), ("gpu", pa.uint8()),
    ("ts", pa.timestamp("us", tz="UTC")), ("power_w", pa.float32()), ("energy_j", pa.float64()),
    ("n_prefill", pa.int32()), ("n_decode", pa.int32()), ("phase", _DICT),
    ("prefill_estimated", pa.bool_()), ("prompt_tokens", pa.float64()), ("output_tokens", pa.float64()),
    ("power_phase", _DICT),
])
"""phase_timeline's rows as they stream (sql/phase_timeline/columns.yaml says what each means)."""


def _label(code: np.ndarray) -> pa.DictionaryArray:
    """Label codes (0 idle, 1 decode, 2 prefill, −1 NULL) as a dictionary column."""
    return pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32), mask=code < 0), _LABELS)


def _filled(values: np.ndarray, hit: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``values[at]`` where ``hit``, zero (false) elsewhere: a slot no busy interval touches."""
    out = np.zeros(len(hit), values.dtype)
    out[hit] = values[at]
    return out


def _timeline_gpu(cur, endpoint: str, host: str, gpu: int, from_ns: int, to_ns: int, state: dict | None, has_segments: bool,
                  days: int) -> pa.RecordBatch | None:
    """One endpoint GPU's rows (holding [from_ns, to_ns)): its power_100ms slots read in file order
    (the part is sorted by host, gpu, ts) and interpolated across gaps of at most 1 s
    (kernels.interpolated_slots), kept where the endpoint held it; its endpoint's request ``state``
    (TIMELINE_STATE_SQL's columns, None: no request log, phase NULL) looked up by slot; its power runs
    (phase_segments) labelled onto its slots (kernels.max_label_on_slots)."""
    with kernels.in_file_order(cur):
        p = cur.execute(_TIMELINE_POWER, {"host": host, "gpu": gpu}).fetchnumpy()
    if not len(p["slot"]):
        return None
    slot, power_w = p["slot"].astype(np.int64), np.asarray(p["power_w"], np.float64)
    if len(slot) > 1 and not bool((np.diff(slot) > 0).all()):  # not in file order (a part written unsorted)
        order = np.argsort(slot, kind="stable")
        slot, power_w = slot[order], power_w[order]
    slot, power_w = kernels.interpolated_slots(slot, power_w)
    held = (slot * kernels.SLOT_NS >= from_ns) & (slot * kernels.SLOT_NS < to_ns)  # slots the endpoint held the GPU at
    if not held.all():
        slot, power_w = slot[held], power_w[held]
    n = len(slot)
    if not n:
        return None
    st = state if state is not None else {"slot": np.zeros(0, np.int64)}
    at = np.minimum(np.searchsorted(st["slot"], slot), max(len(st["slot"]) - 1, 0))
    hit = (st["slot"][at] == slot) if len(st["slot"]) else np.zeros(n, bool)
    at = at[hit]
    pick = {c: _filled(st[c], hit, at) if c in st else np.zeros(n, np.int32)
            for c in ("n_prefill", "n_decode", "prefill_estimated", "prompt_tokens", "output_tokens", "ph")}
    ph = pick["ph"]
    phase = np.where(ph == 2, 2, np.where(ph == 1, 1, 0)) if state is not None else np.full(n, -1)
    power_phase = np.full(n, -1, np.int8)
    if has_segments:
        runs = cur.execute(_TIMELINE_POWER_RUNS, {"endpoint": endpoint, "host": host, "gpu": gpu}).fetchnumpy()
        power_phase = kernels.max_label_on_slots(slot, runs["first"].astype(np.int64), runs["last"].astype(np.int64),
                                                 runs["ph"].astype(np.int8), 3)
    return pa.record_batch({
        "date": pa.Array.from_buffers(pa.date32(), n, [None, pa.py_buffer(np.full(n, days, np.int32))]),
        "endpoint": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([endpoint])),
        "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([host])),
        "gpu": pa.array(np.full(n, gpu, np.uint8)),
        "ts": pa.array(slot * (kernels.SLOT_NS // 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "power_w": power_w.astype(np.float32),
        "energy_j": power_w * 0.1,
        "n_prefill": pick["n_prefill"].astype(np.int32),
        "n_decode": pick["n_decode"].astype(np.int32),
        "phase": _label(phase),
        "prefill_estimated": pick["prefill_estimated"].astype(bool),
        "prompt_tokens": pick["prompt_tokens"].astype(np.float64),
        "output_tokens": pick["output_tokens"].astype(np.float64),
        "power_phase": _label(power_phase),
    }, schema=TIMELINE_TABLE_SCHEMA)


def _timeline_batches(cur, gpus: list[tuple], logged: set[str], has_segments: bool, days: int) -> Iterator[pa.RecordBatch]:
    """phase_timeline's rows endpoint by endpoint, GPU by GPU in (gk, slot) order, on ``cur`` (a
    second connection, as every streamed table's: the step's own may be reading the stream): the endpoint's request state
    (TIMELINE_STATE_SQL, where it has a request log) then each of its GPUs (_timeline_gpu). Memory:
    one endpoint's busy slots and one GPU-day's slots."""
    try:
        state: tuple = (None, None)
        for _, endpoint, host, gpu, _, from_ns, to_ns in gpus:  # GPUS_SQL's rows: a slot is the endpoint's that held the GPU at its start
            if state[0] != endpoint:
                state = (endpoint, cur.execute(TIMELINE_STATE_SQL, {"endpoint": endpoint}).fetchnumpy() if endpoint in logged else None)
            batch = _timeline_gpu(cur, endpoint, host, gpu, from_ns, to_ns, state[1], has_segments, days)
            if batch is not None:
                yield batch
    finally:
        cur.close()


def timeline_rows(con, run: TableRun) -> pa.RecordBatchReader:
    """phase_timeline's rows (a Python table), streamed endpoint GPU by endpoint GPU
    (_timeline_batches). A table not built for the day yet reads as empty: no phase_intervals, every
    label NULL; no phase_segments, every power_phase NULL."""
    cur = kernels.second_connection(con)
    present = {v for (v,) in cur.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    gpus = cur.execute(GPUS_SQL).fetchall()
    logged = {e for (e,) in cur.execute(
        "SELECT DISTINCT endpoint FROM phase_intervals WHERE date = getvariable('partition_date')").fetchall()} if "phase_intervals" in present else set()
    days = int(np.datetime64(str(run.scope.date), "D").astype(np.int64))
    return pa.RecordBatchReader.from_batches(TIMELINE_TABLE_SCHEMA, _timeline_batches(cur, gpus, logged, "phase_segments" in present, days))


@contextmanager
def arrow_registered(con, name: str, table: pa.Table) -> Iterator[None]:
    """An Arrow table visible to SQL as view ``name`` for the statements of the block (as
    kernels.registered, without a trip through polars: DECIMAL columns stay as they are)."""
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


INTERVAL_WINDOWS_SQL = """
-- each logged endpoint's GPUs, each over the time it held it this day (held_gpus) inside the GPU's
-- samples of the day (a GPU held by one endpoint in the morning and another in the afternoon is one
-- window of each); one group per GPU first: the join then sees a row per GPU, not per sample
WITH per_gpu AS (
    SELECT host, gpu, min(first_t_ns) AS lo, max(last_t_ns) AS hi FROM energy_curve WHERE date = getvariable('partition_date') GROUP BY host, gpu
)
SELECT g.name AS endpoint, g.host, g.gpu, g.from_ns, g.to_ns, greatest(c.lo, g.from_ns) AS lo, least(c.hi, g.to_ns) AS hi
FROM per_gpu AS c JOIN held_gpus('endpoint') AS g USING (host, gpu)
WHERE g.name IN (SELECT endpoint FROM request_phases) AND least(c.hi, g.to_ns) > greatest(c.lo, g.from_ns)
ORDER BY ALL
"""

INTERVAL_REQUESTS_SQL = """
-- the day's request phase intervals clipped to their endpoint's span (first to last sample of its
-- GPUs this day while they were its: _pi_windows); a request of the day before still running at
-- midnight keeps its rate, so it gets this day's share. Rates are summed as DECIMAL (tokens per ns
-- to 1e-30): exact sums, so the result does not depend on the order in which DuckDB's threads add
-- them (DOUBLE sums differed in the last bit from one run to the next).
WITH span AS (SELECT endpoint, min(lo) AS lo, max(hi) AS hi FROM _pi_windows GROUP BY endpoint)
SELECT iv.endpoint, iv.phase = 'prefill' AS pre, iv.rate::DECIMAL(38, 30) AS rate, iv.estimated,
       greatest(iv.a_ns, s.lo) AS a_ns, least(iv.b_ns, s.hi) AS b_ns
FROM request_intervals AS iv JOIN span AS s USING (endpoint)
WHERE least(iv.b_ns, s.hi) > greatest(iv.a_ns, s.lo)
"""

INTERVAL_SWEEP_SQL = """
-- one endpoint's elementary intervals ($endpoint; _pi_windows, _pi_requests above): its day cut at
-- every request event (prefill start, first token, end; and at each whole UTC hour, for the hour
-- buckets) between the first and the last sample of its GPUs. A running sum over the events (+1 / −1
-- and ± token rate at each interval's ends): linear in requests, no grid.
WITH span AS (
    SELECT endpoint, min(lo) AS lo, max(hi) AS hi FROM _pi_windows WHERE endpoint = $endpoint GROUP BY endpoint
),
requests AS (SELECT * FROM _pi_requests WHERE endpoint = $endpoint),
ev AS (
    SELECT endpoint, a_ns AS t, CASE WHEN pre THEN 1 ELSE 0 END AS dn_pre, CASE WHEN pre THEN 0 ELSE 1 END AS dn_dec,
           estimated::INT AS dest, CASE WHEN pre THEN rate ELSE 0 END AS dr_pre, CASE WHEN pre THEN 0 ELSE rate END AS dr_dec
    FROM requests
    UNION ALL
    SELECT endpoint, b_ns, CASE WHEN pre THEN -1 ELSE 0 END, CASE WHEN pre THEN 0 ELSE -1 END,
           -estimated::INT, CASE WHEN pre THEN -rate ELSE 0 END, CASE WHEN pre THEN 0 ELSE -rate END
    FROM requests
    UNION ALL  -- the span's ends and the whole hours inside it
    SELECT endpoint, unnest(list_distinct([lo, hi] || range((lo // 3600000000000 + 1) * 3600000000000, hi, 3600000000000))),
           0, 0, 0, 0.0, 0.0
    FROM span
),
gpu_ev AS (  -- GPUs joining and leaving the endpoint inside its span (a GPU held all day: the span's ends)
    SELECT w.endpoint, greatest(w.from_ns, s.lo) AS t, 1 AS dg FROM _pi_windows AS w JOIN span AS s USING (endpoint)
    UNION ALL
    SELECT w.endpoint, least(w.to_ns, s.hi), -1 FROM _pi_windows AS w JOIN span AS s USING (endpoint)
),
all_ev AS (
    SELECT endpoint, t, dn_pre, dn_dec, dest, dr_pre, dr_dec, 0 AS dg FROM ev
    UNION ALL
    SELECT endpoint, t, 0, 0, 0, 0.0, 0.0, dg FROM gpu_ev
),
at_t AS (
    SELECT endpoint, t, sum(dn_pre) AS dn_pre, sum(dn_dec) AS dn_dec, sum(dest) AS dest,
           sum(dr_pre) AS dr_pre, sum(dr_dec) AS dr_dec, sum(dg) AS dg
    FROM all_ev GROUP BY endpoint, t
),
state AS (
    SELECT endpoint, t AS start_ns, lead(t) OVER w AS end_ns,
           sum(dn_pre) OVER c AS n_prefill, sum(dn_dec) OVER c AS n_decode, sum(dest) OVER c AS n_estimated,
           sum(dr_pre) OVER c AS rate_pre, sum(dr_dec) OVER c AS rate_dec, sum(dg) OVER c AS gpus
    FROM at_t
    WINDOW w AS (PARTITION BY endpoint ORDER BY t), c AS (w ROWS UNBOUNDED PRECEDING)
)
SELECT endpoint, start_ns, end_ns, n_prefill::INTEGER AS n_prefill, n_decode::INTEGER AS n_decode,
       n_estimated > 0 AS prefill_estimated,
       CASE WHEN n_prefill > 0 THEN rate_pre::DOUBLE ELSE 0 END AS rate_pre,  -- token rates (tokens per ns); exact 0 when nobody is in the phase
       CASE WHEN n_decode > 0 THEN rate_dec::DOUBLE ELSE 0 END AS rate_dec,
       CASE WHEN n_prefill > 0 THEN 'prefill' WHEN n_decode > 0 THEN 'decode' ELSE 'idle' END AS phase,
       gpus::BIGINT AS gpus
FROM state WHERE end_ns IS NOT NULL
"""

INTERVAL_ROWS_SQL = """
-- phase_intervals' rows of one endpoint: its intervals (_pi) with their energy from the endpoint's
-- cumulative energy at each boundary (_pi_energy: t, e_j, all its GPUs each while it held it), E(end)
-- − E(start); an interval where it held no GPU has NULL energy: nothing measured.
SELECT
    getvariable('partition_date') AS date,
    p.endpoint,
    make_timestamptz(p.start_ns // 1000) AS start_ts,
    make_timestamptz(p.end_ns // 1000) AS end_ts,
    p.start_ns,
    p.end_ns,
    p.phase,
    p.n_prefill,
    p.n_decode,
    p.prefill_estimated,
    p.rate_pre * (p.end_ns - p.start_ns) AS prompt_tokens,
    p.rate_dec * (p.end_ns - p.start_ns) AS output_tokens,
    CASE WHEN p.gpus > 0 THEN b.e_j - a.e_j END AS energy_j,
    p.gpus,
    p.rate_pre * 1e9 AS prompt_tokens_per_s,
    p.rate_dec * 1e9 AS output_tokens_per_s
FROM _pi AS p
JOIN _pi_energy AS a ON a.t = p.start_ns
JOIN _pi_energy AS b ON b.t = p.end_ns
ORDER BY p.start_ns
"""

INTERVALS_TABLE_SCHEMA = pa.schema([
    ("date", pa.date32()), ("endpoint", pa.string()), ("start_ts", pa.timestamp("us", tz="UTC")),
    ("end_ts", pa.timestamp("us", tz="UTC")), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("phase", pa.string()),
    ("n_prefill", pa.int32()), ("n_decode", pa.int32()), ("prefill_estimated", pa.bool_()), ("prompt_tokens", pa.float64()),
    ("output_tokens", pa.float64()), ("energy_j", pa.float64()), ("gpus", pa.int64()), ("prompt_tokens_per_s", pa.float64()),
    ("output_tokens_per_s", pa.float64()),
])
"""phase_intervals' rows as stored (sql/phase_intervals/columns.yaml says what each means)."""


def _endpoint_energy(cur, windows: list[tuple], t: np.ndarray, cache: CurveCache | None) -> np.ndarray:
    """The endpoint's cumulative energy (J) at each sorted instant ``t``: each of its GPUs' curve
    (curve.curves: the run's cache, else one read of the host for these GPUs) searched once, summed
    over its ``windows`` (host, gpu, from_ns, to_ns) in that order, each GPU counting only while the
    endpoint held it."""
    energy = np.zeros(len(t))
    held: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for host, gpu, from_ns, to_ns in windows:
        held.setdefault((host, gpu), []).append((from_ns, to_ns))
    for host, gpu, c in curve.curves(cur, held, cache=cache):
        for from_ns, to_ns in held[(host, gpu)]:
            energy += c.energy_at(np.clip(t, from_ns, to_ns))
        del c  # before the next GPU's curve is built
    return energy


def _interval_batches(cur, windows: pa.Table, requests: pa.Table, cache: CurveCache | None) -> Iterator[pa.RecordBatch]:
    """phase_intervals' rows endpoint by endpoint on ``cur`` (a second connection, as every
    streamed table's: the step's own may be reading the stream): its sweep (INTERVAL_SWEEP_SQL), the endpoint's cumulative energy
    at every boundary of its intervals (_endpoint_energy: one sorted search per GPU on its curve,
    not an ASOF join over the cluster-day's samples), then INTERVAL_ROWS_SQL. Memory: one endpoint's
    intervals and one GPU's curve."""
    try:
        with arrow_registered(cur, "_pi_windows", windows), arrow_registered(cur, "_pi_requests", requests):
            by_endpoint: dict[str, list[tuple]] = {}
            for w in windows.to_pylist():
                by_endpoint.setdefault(w["endpoint"], []).append((w["host"], w["gpu"], w["from_ns"], w["to_ns"]))
            for endpoint, held in by_endpoint.items():
                pi = cur.sql(INTERVAL_SWEEP_SQL, params={"endpoint": endpoint}).to_arrow_table()
                t = np.unique(np.concatenate([pi["start_ns"].to_numpy(), pi["end_ns"].to_numpy()]))
                e = pl.DataFrame({"t": t, "e_j": _endpoint_energy(cur, held, t, cache)})
                with arrow_registered(cur, "_pi", pi), registered(cur, "_pi_energy", e):
                    for batch in cur.sql(INTERVAL_ROWS_SQL).to_arrow_reader(BATCH_ROWS):
                        yield batch.cast(INTERVALS_TABLE_SCHEMA)
                del pi, e
    finally:
        cur.close()


def interval_rows(con, run: TableRun) -> pa.RecordBatchReader:
    """phase_intervals' rows (a Python table), streamed endpoint by endpoint (_interval_batches)."""
    cur = kernels.second_connection(con)
    windows = cur.sql(INTERVAL_WINDOWS_SQL).to_arrow_table()
    with arrow_registered(cur, "_pi_windows", windows):
        requests = cur.sql(INTERVAL_REQUESTS_SQL).to_arrow_table()
    # the run's curves looked up here, in the step's thread: the stream may be read elsewhere (by DuckDB's threads where the scope cuts rows)
    return pa.RecordBatchReader.from_batches(INTERVALS_TABLE_SCHEMA, _interval_batches(cur, windows, requests, run_curves()))


GPUS_SQL = """
-- one row (key gk) per endpoint GPU and time the endpoint held it this day (held_gpus), endpoint by endpoint
SELECT row_number() OVER (ORDER BY name, host, gpu, from_ns) AS gk, name AS endpoint, host, gpu, tdp_w::DOUBLE AS tdp_w, from_ns, to_ns
FROM held_gpus('endpoint')
ORDER BY gk
"""

REQUEST_RUNS_SQL = """
-- runs of one label over the endpoint's exact intervals while it held the GPU, [$lo, $hi) (contiguous:
-- gaps and islands on row numbers); an interval cut by the holding's ends keeps its share of tokens
SELECT endpoint, CASE phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 ELSE 2 END AS ph, min(a_ns) AS lo, max(b_ns) AS hi,
       xsum(prompt_tokens * share) AS prompt_tokens, xsum(output_tokens * share) AS output_tokens
FROM (
    SELECT *, (b_ns - a_ns) / (end_ns - start_ns) AS share,
              row_number() OVER (PARTITION BY endpoint ORDER BY start_ns)
              - row_number() OVER (PARTITION BY endpoint, phase ORDER BY start_ns) AS run
    FROM (SELECT *, greatest(start_ns, $lo) AS a_ns, least(end_ns, $hi) AS b_ns FROM phase_intervals
          WHERE date = getvariable('partition_date') AND endpoint = $endpoint AND end_ns > $lo AND start_ns < $hi)
)
GROUP BY endpoint, phase, run
ORDER BY lo
"""

SEGMENTS_TABLE_SCHEMA = pa.schema([
    ("date", pa.date32()), ("endpoint", pa.string()), ("host", pa.string()), ("gpu", pa.uint8()),
    ("start_ts", pa.timestamp("us", tz="UTC")), ("end_ts", pa.timestamp("us", tz="UTC")), ("phase", pa.string()),
    ("source", pa.string()), ("mean_w", pa.float32()), ("peak_w", pa.float32()), ("energy_j", pa.float64()),
    ("prompt_tokens", pa.float64()), ("output_tokens", pa.float64()), ("above_tdp", pa.bool_()),
    ("sample_interval_ms", pa.float64()), ("endpoint_segment", pa.int32()),
])
"""phase_segments' rows as stored (sql/phase_segments/columns.yaml says what each means)."""

POWER_GPUS_SCHEMA = {
    "gk": pl.Int64, "source": pl.String, "is_average": pl.Boolean, "sample_interval_ms": pl.Float64, "unresolved": pl.String,
}
SEGMENTS_SCHEMA = {
    "gk": pl.Int64, "src": pl.Int32, "ph": pl.Int32, "lo": pl.Int64, "hi": pl.Int64, "energy_j": pl.Float64,
    "mean_w": pl.Float64, "peak_w": pl.Float64, "prompt_tokens": pl.Float64, "output_tokens": pl.Float64,
}


_INT32 = np.iinfo(np.int32)


def median_ns(gaps: np.ndarray) -> float:
    """``np.median`` of int64 spacings (ns, non-empty), partitioned as int32 where every one fits (a
    GPU's linked samples are at most RUN_GAP_NS = 2 s apart): the same value, since the middle one
    or two are averaged in double either way, with half the bytes to copy and partition."""
    if _INT32.min <= gaps.min() and gaps.max() <= _INT32.max:
        gaps = gaps.astype(np.int32)
    return float(np.median(gaps))


def source_stats(c: curve.Curve, gk: int, tdp_w: float | None = None, levels: dict | None = None) -> dict:
    """The GPU's power source of the day (the one with most samples in its curve ``c``), whether it is a
    1 s average and the median spacing of its samples (ms); why its workload cannot be segmented
    from power alone (power_detect.unresolved; None where it can). Marks the source's rows (``c.mine``).
    ``levels``: where given, the power levels found on the way (power_detect.gpu_levels) are left
    there ("levels", "whole"), for the detector on the same samples."""
    found = curve.curve_sources(c)
    if not found:
        return {}
    best, _, is_average = found[0]
    if len(found) > 1:  # one source: every row is its
        c.mine = c.source_id == c.source_names.index(best)
    gaps = c.next_gaps_ns(c.mine)
    interval_ms = median_ns(gaps) / 1e6 if len(gaps) else None
    unresolved = None
    if not is_average and interval_ms is not None and interval_ms <= power_detect.PREFILL_RESOLVABLE_MS and tdp_w is not None:
        lv, whole = power_detect.gpu_levels(c.power_w_narrowest, float(tdp_w))
        if levels is not None:
            levels.update(levels=lv, whole=whole)
        unresolved = power_detect.unresolved(c.t_ns, c.power_w, float(tdp_w), int(interval_ms * 1e6), levels=lv)
    return {"gk": gk, "source": best, "is_average": bool(is_average), "sample_interval_ms": interval_ms, "unresolved": unresolved}


def _gpus_by_curve(con, rows: list[tuple], cache: CurveCache | None | Literal["run"] = curve.RUN) -> Iterator[tuple[tuple, curve.Curve]]:
    """Each row of ``rows`` (gk, endpoint, host, gpu, ...) with its GPU's curve, GPU by GPU in
    (host, gpu) order, gk order within a GPU: each host's samples read once (curve.curves), one
    GPU's curve in memory (a caller drops the curve before asking for the next GPU's)."""
    of_gpu: dict[tuple[str, int], list[tuple]] = {}
    for row in rows:
        of_gpu.setdefault((row[2], row[3]), []).append(row)
    for host, gpu, c in curve.curves(con, of_gpu, cache=cache):
        for row in of_gpu[(host, gpu)]:
            yield row, c
        del c


def _power_gpus_frame(gpus: list[tuple], stats: list[dict]) -> pl.DataFrame:
    """Per endpoint GPU with power (``gpus``: gk, endpoint, host, gpu, tdp_w, ...; ``stats``:
    source_stats of each), its source, sample interval and whether power-only detection can
    resolve prefills there: what the table's check and headline say per endpoint."""
    s = pl.DataFrame(sorted(stats, key=lambda r: r["gk"]), schema=POWER_GPUS_SCHEMA)
    g = pl.DataFrame([r[:5] for r in gpus], schema={"gk": pl.Int64, "endpoint": pl.String, "host": pl.String, "gpu": pl.Int64,
                                                   "tdp_w": pl.Float64}, orient="row")
    return g.join(s, on="gk", how="inner").with_columns(
        (~pl.col("is_average") & (pl.col("sample_interval_ms") <= power_detect.PREFILL_RESOLVABLE_MS)
         & pl.col("unresolved").is_null()).alias("resolvable")
    ).select("endpoint", "host", "gpu", "gk", "tdp_w", "source", "is_average", "sample_interval_ms", "unresolved", "resolvable").sort("gk")


def power_gpus(con) -> pl.DataFrame:
    """Per endpoint GPU with power: its source, sample interval and whether power-only detection can
    resolve prefills there (_power_gpus_frame), reading each GPU's curve once; what phase_segments'
    step finds as it goes (TableRun.found), for a look outside a run."""
    gpus = con.execute(GPUS_SQL).fetchall()
    stats = []
    for (gk, _, _, _, tdp_w, _, _), c in _gpus_by_curve(con, gpus):
        st = source_stats(c, gk, tdp_w)
        if st:
            stats.append(st)
        del c
    return _power_gpus_frame(gpus, stats)


def _gpu_runs(row: tuple, c: curve.Curve, request_runs: pl.DataFrame) -> tuple[dict, pl.DataFrame | None]:
    """One endpoint GPU's runs (SEGMENTS_SCHEMA) on its curve ``c`` and its source_stats: the
    endpoint's request runs over its holding (``request_runs``) with their energies E(hi) − E(lo)
    and peaks by sorted searches on the curve, and the power-only detector
    (pipeline/phases/power_detect.py) on its samples while held, where its source resolves them."""
    gk, _, _, _, tdp_w, from_ns, to_ns = row
    found: dict = {}
    st = source_stats(c, gk, tdp_w, found)
    frames = []
    r = request_runs
    if len(r):
        lo, hi = r["lo"].to_numpy(), r["hi"].to_numpy()
        e, p = c.energy_power_at(np.concatenate([lo, hi]))
        energy = e[len(lo):] - e[: len(lo)]
        peak = np.fmax(np.fmax(c.peak_in(lo, hi), p[: len(lo)]), p[len(lo):])
        frames.append(pl.DataFrame({
            "gk": np.full(len(lo), gk), "src": 0, "ph": r["ph"].to_numpy(), "lo": lo, "hi": hi, "energy_j": energy,
            "mean_w": energy / ((hi - lo) / 1e9), "peak_w": peak,
            "prompt_tokens": r["prompt_tokens"].to_numpy(), "output_tokens": r["output_tokens"].to_numpy(),
        }, schema=SEGMENTS_SCHEMA, nan_to_null=True))
    if st:
        ms = st["sample_interval_ms"]
        if not st["is_average"] and ms is not None and ms <= power_detect.PREFILL_RESOLVABLE_MS:
            # the GPU's samples while the endpoint held it: a slice, the curve is in time order
            a, b = np.searchsorted(c.t_ns, [from_ns, to_ns], side="left")
            # held all day with every sample finite: the levels source_stats found are the detector's
            levels = found.get("levels") if found.get("whole") and a == 0 and b == len(c) else None
            runs = power_detect.detect_gpu(gk, c.t_ns[a:b], c.power_w[a:b], float(tdp_w), power_detect.ONSET_LEAD_NS.get(st["source"], 0),
                                           st["source"] in power_detect.TRAILING_SOURCES, prefill=st["unresolved"] is None, levels=levels)
            lo, hi = runs["lo"].to_numpy(), runs["hi"].to_numpy()
            e = c.energy_at(np.concatenate([lo, hi]))
            energy = e[len(lo):] - e[: len(lo)]
            frames.append(pl.DataFrame({
                "gk": runs["gk"], "src": 1, "ph": runs["ph"].cast(pl.Int32), "lo": lo, "hi": hi, "energy_j": energy,
                "mean_w": energy / ((hi - lo) / 1e9), "peak_w": runs["peak_w"], "prompt_tokens": None, "output_tokens": None,
            }, schema=SEGMENTS_SCHEMA))
    return st, (pl.concat(frames) if frames else None)


def segment_numbers(runs: pl.DataFrame, gpus: list[tuple]) -> np.ndarray:
    """endpoint_segment of each of one endpoint's runs (``runs``: SEGMENTS_SCHEMA; ``gpus``: the
    endpoint's GPUS_SQL rows), in the runs' order: numbered from 1 per source and phase in (start,
    host, gpu) order, a run starting a new one where it starts (µs, as stored) at or after every
    earlier run's end (µs). Rows of the endpoint's GPUs whose runs overlap are one run (a
    tensor-parallel prefill is on every GPU of its replica at once), so count(DISTINCT
    endpoint_segment) counts one prefill once whatever the endpoint's GPU count. A sort and a
    running max per source and phase (the windows of tests/oracles/phase_segments_rows.sql)."""
    n = runs.height
    out = np.zeros(n, np.int32)
    if not n:
        return out
    gks = np.array([r[0] for r in gpus], np.int64)
    host_rank = {h: i for i, h in enumerate(sorted({r[2] for r in gpus}))}  # code-point order: DuckDB's for VARCHAR
    at = np.searchsorted(gks, runs["gk"].to_numpy())
    host = np.array([host_rank[r[2]] for r in gpus], np.int64)[at]
    gpu = np.array([r[3] for r in gpus], np.int64)[at]
    src, ph = runs["src"].to_numpy(), runs["ph"].to_numpy()
    start_us, end_us = runs["lo"].to_numpy() // 1000, runs["hi"].to_numpy() // 1000
    order = np.lexsort((gpu, host, start_us, ph, src))
    src, ph, start_us, end_us = src[order], ph[order], start_us[order], end_us[order]
    first = np.flatnonzero(np.r_[True, (src[1:] != src[:-1]) | (ph[1:] != ph[:-1])])
    seg = np.empty(n, np.int32)
    for a, b in zip(first, np.r_[first[1:], n], strict=True):  # one source and phase
        reach = np.maximum.accumulate(end_us[a:b])  # every run's end up to each
        starts = np.r_[True, start_us[a + 1:b] >= reach[:-1]]
        seg[a:b] = np.cumsum(starts)
    out[order] = seg
    return out


_PHASES = pa.array(["idle", "decode", "prefill"], pa.string())
_SOURCES = pa.array(["requests", "power"], pa.string())


def _strings(values: pa.Array, codes: np.ndarray) -> pa.Array:
    """``values[codes]`` as a plain string column (a gather in Arrow, no Python string per row)."""
    return values.take(pa.array(codes, pa.int32()))


def segment_table_batches(runs: pl.DataFrame, gpus: list[tuple], interval_ms: dict[int, float | None], days: int) -> Iterator[pa.RecordBatch]:
    """phase_segments' rows of one endpoint's ``runs`` (SEGMENTS_SCHEMA), GPU by GPU in gk order,
    each GPU's requests' runs then power's, in time order; ``gpus``: the endpoint's GPUS_SQL rows,
    ``interval_ms``: each GPU's sample interval (source_stats; absent: NULL), ``days``: the date."""
    numbers = segment_numbers(runs, gpus)
    of = {r[0]: r for r in gpus}
    gk_all = runs["gk"].to_numpy()
    src_all, lo_all = runs["src"].to_numpy(), runs["lo"].to_numpy()
    for gk in np.unique(gk_all):  # GPU by GPU: each one's rows sorted alone
        mine = np.flatnonzero(gk_all == gk)
        rows = mine[np.lexsort((lo_all[mine], src_all[mine]))]  # by source, then start (a GPU's runs of one source are disjoint)
        r = runs[rows]
        _, endpoint, host, gpu, tdp_w = of[int(gk)][:5]
        n = len(rows)
        peak = r["peak_w"].to_numpy()  # NaN where NULL
        peak_null = r["peak_w"].is_null().to_numpy()
        # DuckDB orders NaN above every number: a NaN peak is above the TDP
        above = ~peak_null & ((peak > tdp_w) | np.isnan(peak)) if tdp_w is not None else np.zeros(n, bool)
        interval = interval_ms.get(int(gk))
        yield pa.record_batch({
            "date": pa.Array.from_buffers(pa.date32(), n, [None, pa.py_buffer(np.full(n, days, np.int32))]),
            "endpoint": _strings(pa.array([endpoint], pa.string()), np.zeros(n, np.int32)),
            "host": _strings(pa.array([host], pa.string()), np.zeros(n, np.int32)),
            "gpu": pa.array(np.full(n, gpu, np.uint8)),
            "start_ts": pa.array(r["lo"].to_numpy() // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "end_ts": pa.array(r["hi"].to_numpy() // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "phase": _strings(_PHASES, r["ph"].to_numpy()),
            "source": _strings(_SOURCES, r["src"].to_numpy()),
            "mean_w": r["mean_w"].cast(pl.Float32).to_arrow(),
            "peak_w": r["peak_w"].cast(pl.Float32).to_arrow(),
            "energy_j": r["energy_j"].to_arrow(),
            "prompt_tokens": r["prompt_tokens"].to_arrow(),
            "output_tokens": r["output_tokens"].to_arrow(),
            "above_tdp": pa.array(above),
            "sample_interval_ms": pa.array(np.full(n, interval if interval is not None else 0.0), mask=np.full(n, interval is None)),
            "endpoint_segment": pa.array(numbers[rows], pa.int32()),
        }, schema=SEGMENTS_TABLE_SCHEMA)


def _segment_batches(cur, gpus: list[tuple], found: dict, cache: CurveCache | None, days: int) -> Iterator[pa.RecordBatch]:
    """phase_segments' rows endpoint by endpoint (``gpus``: GPUS_SQL's rows, gk order), on ``cur``
    (a second connection, as every streamed table's: the step's own may be reading the stream): each of the endpoint's GPUs'
    curves built once (curve.curves: the run's cache, else one read of the host's samples for the
    endpoint's GPUs), its runs computed on it (_gpu_runs), then numbered and shaped into the table's
    rows GPU by GPU (segment_table_batches: a sort and a running max in numpy; the SQL windows they
    replaced are tests/oracles/phase_segments_rows.sql). Memory: one GPU's curve and one endpoint's runs.
    Leaves the per-GPU power facts in ``found["power_gpus"]`` (_power_gpus_frame) for the check and
    headline."""
    stats: list[dict] = []
    try:
        by_endpoint: dict[str, list[tuple]] = {}
        for row in gpus:
            by_endpoint.setdefault(row[1], []).append(row)
        for endpoint, rows in by_endpoint.items():  # gk order: endpoints in name order
            frames: list[pl.DataFrame] = []
            runs_of: tuple = (None, None)  # (holding, its request runs)
            ep_stats = []
            for row, c in _gpus_by_curve(cur, rows, cache):
                if runs_of[0] != (row[5], row[6]):
                    runs_of = ((row[5], row[6]), arrow_frame(cur.sql(
                        REQUEST_RUNS_SQL, params={"endpoint": endpoint, "lo": row[5], "hi": row[6]}).to_arrow_table()))
                st, f = _gpu_runs(row, c, runs_of[1])
                del c  # before the next GPU's curve is built
                if st:
                    ep_stats.append(st)
                if f is not None:
                    frames.append(f)
            stats += ep_stats
            if not frames:
                continue
            runs = pl.concat(frames)
            del frames
            yield from segment_table_batches(runs, rows, {st["gk"]: st["sample_interval_ms"] for st in ep_stats}, days)
            del runs
        found["power_gpus"] = _power_gpus_frame(gpus, stats)
    finally:
        cur.close()


def segment_rows(con, run: TableRun) -> pa.RecordBatchReader:
    """phase_segments' rows (a Python table), streamed endpoint by endpoint (_segment_batches)."""
    cur = kernels.second_connection(con)
    gpus = cur.execute(GPUS_SQL).fetchall()
    # the run's curves looked up here, in the step's thread: the stream may be read elsewhere (by DuckDB's threads where the scope cuts rows)
    days = int(np.datetime64(str(run.scope.date), "D").astype(np.int64))
    return pa.RecordBatchReader.from_batches(SEGMENTS_TABLE_SCHEMA, _segment_batches(cur, gpus, run.found, run_curves(), days))


CONTINUOUS_BATCHING_MS = 45.0
"""Half of h200-capture-4's median prefill (90 ms, continuous batching): samples at most this far
apart resolve such prefills (pipeline/phases/power_detect.py: PREFILL_RESOLVABLE_MS)."""


def power_resolution(con, power_gpus_found: pl.DataFrame | None = None) -> dict:
    """Per endpoint and power source (``power_gpus_found``: phase_segments' per-GPU power facts, read
    from the curves when not given): the samples' spacing and whether power alone can resolve
    prefills there (a 1 s average or samples over 300 ms apart cannot: say so rather than guess)."""
    frame = power_gpus(con) if power_gpus_found is None else power_gpus_found
    out: dict = {}
    rows = checks.over_power_gpus(
        con, frame,
        "SELECT endpoint, source, bool_or(is_average), median(sample_interval_ms), bool_and(resolvable), min(unresolved) "
        "FROM _power_gpus GROUP BY ALL ORDER BY 1, 2",
    )
    for endpoint, source, is_average, interval_ms, resolvable, unresolved in rows:
        if is_average:
            verdict = f"prefills cannot be resolved at {interval_ms:.0f} ms: the source is a 1 s average"
        elif unresolved is not None:
            verdict = f"prefills cannot be resolved from power alone: {unresolved}"
        elif not resolvable:
            verdict = f"prefills cannot be resolved at {interval_ms:.0f} ms"
        elif interval_ms <= CONTINUOUS_BATCHING_MS:
            verdict = "resolves prefills of a few samples, continuous batching's included"
        else:
            verdict = f"resolves prefills longer than ~{2 * interval_ms:.0f} ms only (static batching), not continuous batching's"
        out.setdefault(endpoint, {})[source] = {"sample_interval_ms": None if interval_ms is None else round(interval_ms, 1), "power_only": verdict}
    return out


PHASE_INTERVALS = Table(
    "phase_intervals",
    "Per logged endpoint: the elementary intervals between consecutive request events with their "
    "label (prefill / decode / idle), requests and tokens in each, and their energy (J, all GPUs, "
    "from the energy curve). The exact timeline request_energy and phase_segments use.",
    "cluster-day",
    deps=["energy_curve", "requests"],
    group="phases",
    rows=interval_rows,
)
(phase_intervals,) = table_assets(PHASE_INTERVALS)

PHASE_SEGMENTS = Table(
    "phase_segments",
    "Maximal runs of one phase per endpoint GPU, `source` = requests (event time) or power (the "
    "native power-only detector), with mean/peak W, energy J, tokens, whether the peak exceeded TDP "
    "and the power samples' interval.",
    "cluster-day",
    deps=["phase_intervals", "energy_curve"],
    group="phases",
    rows=segment_rows,
    python_checks=(
        PythonCheck(
            "power_segmentation_agreement",
            "Power-only prefill detection agrees with the request log (precision ≥ 0.7 and recall ≥ 0.5 of prefill time; "
            "median boundary error and energy recall reported).",
            checks.power_segmentation_agreement,
        ),
    ),
    python_headline=lambda con, power_gpus: {"power_resolution": MetadataValue.json(power_resolution(con, power_gpus))},
)
(phase_segments,) = table_assets(PHASE_SEGMENTS)

PHASE_TIMELINE = Table(
    "phase_timeline",
    "Per endpoint GPU and 100 ms slot: power, requests in prefill/decode, the request-based phase "
    "label (from the exact timeline, phase_intervals) and the power-only label (`power_phase`, from phase_segments' native power runs). See "
    "docs/phases.md.",
    "cluster-day",
    deps=["power_100ms", "phase_intervals", "phase_segments"],
    group="phases",
    rows=timeline_rows,
    python_checks=(
        PythonCheck(
            "clock_skew",
            "Request timestamps line up with the power trace (prefill-spike cross-correlation; WARN if offset ≥ 0.5 s).",
            checks.clock_skew,
        ),
    ),
)
(phase_timeline,) = table_assets(PHASE_TIMELINE)
