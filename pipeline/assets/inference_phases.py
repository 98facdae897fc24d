"""Inference phases: `phase_intervals` (the exact timeline, in event time: intervals between
consecutive request events), `phase_segments` (runs of one label, from the request log in event
time and from power alone: the detector of pipeline/phases/power_detect.py on each GPU's own
samples) and `phase_timeline` (the 100 ms grid, derived: charts, the power-only label per slot, the
clock-skew check)."""

from collections.abc import Iterator

import numpy as np
import polars as pl
import pyarrow as pa
from dagster import MetadataValue

from pipeline import kernels
from pipeline.kernels import arrow_frame, registered
from pipeline.phases import checks, curve, power_detect
from pipeline.tables import PythonCheck, Table, statements, table_assets

ENDPOINTS_PER_CHUNK = 4
"""phase_timeline builds its endpoint state (from phase_intervals) this many endpoints at a time: the
hash aggregate over a 64-GPU cluster-day's 16 endpoints' busy slots is held by chunks of 4."""


_NO_SEGMENTS = (
    "CREATE OR REPLACE TEMP VIEW phase_segments AS SELECT NULL::DATE AS date, NULL::VARCHAR AS endpoint, NULL::VARCHAR AS host, "
    "NULL::UTINYINT AS gpu, NULL::VARCHAR AS phase, NULL::VARCHAR AS source, NULL::TIMESTAMPTZ AS start_ts, NULL::TIMESTAMPTZ AS end_ts WHERE false"
)
_NO_INTERVALS = (
    "CREATE OR REPLACE TEMP VIEW phase_intervals AS SELECT NULL::DATE AS date, NULL::VARCHAR AS endpoint, NULL::BIGINT AS start_ns, "
    "NULL::BIGINT AS end_ns, NULL::VARCHAR AS phase, NULL::INTEGER AS n_prefill, NULL::INTEGER AS n_decode, NULL::BOOLEAN AS prefill_estimated, "
    "NULL::DOUBLE AS prompt_tokens_per_s, NULL::DOUBLE AS output_tokens_per_s WHERE false"
)


def _timeline_prepare(con) -> set[str]:
    """phase_timeline's preparatory statements on ``con`` (temp tables _phase_gpus, _phase_ep_state,
    _phase_logged; not _phase_power_slots: the kernel labels power runs itself), the endpoint state built
    ENDPOINTS_PER_CHUNK endpoints at a time (the statements that read ``getvariable('phase_chunk')``).
    A table not built for any day yet is an empty view (phase_segments: power_phase NULL;
    phase_intervals: phase NULL). Returns the derived views present."""
    prepare, _ = statements("phase_timeline/phase_timeline")
    present = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    if "phase_segments" not in present:
        con.execute(_NO_SEGMENTS)
    if "phase_intervals" not in present:
        con.execute(_NO_INTERVALS)
    n_endpoints = con.execute("SELECT count(DISTINCT name) FROM held_gpus('endpoint')").fetchone()[0]
    chunks = max(1, -(-n_endpoints // ENDPOINTS_PER_CHUNK))
    con.execute("SET VARIABLE phase_chunks = ?", [chunks])
    for statement in prepare:
        if "_phase_power_slots AS" in statement:
            continue
        if "getvariable('phase_chunk')" not in statement:
            con.execute(statement)
            continue
        for chunk in range(chunks):
            con.execute("SET VARIABLE phase_chunk = ?", [chunk])
            con.execute(statement)
    return present


EKEY_SLOTS = 1048576
"""The SQL's endpoint-state key: ek · EKEY_SLOTS + (slot − day_first_slot())."""

_TIMELINE_POWER = """
SELECT epoch_us(ts) // 100000 AS slot, power_w::DOUBLE AS power_w FROM power_100ms
WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu AND power_w IS NOT NULL
"""
_TIMELINE_STATE = """
SELECT ekey, coalesce(n_prefill, 0) AS n_prefill, coalesce(n_decode, 0) AS n_decode,
       coalesce(prefill_estimated, false) AS prefill_estimated, coalesce(prompt_tokens, 0) AS prompt_tokens,
       coalesce(output_tokens, 0) AS output_tokens, coalesce(ph, 0) AS ph
FROM _phase_ep_state WHERE ekey >= $lo AND ekey < $hi ORDER BY ekey
"""
_TIMELINE_POWER_RUNS = """
SELECT epoch_us(start_ts) // 100000 AS first, (epoch_us(end_ts) - 1) // 100000 AS last,
       CASE phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 ELSE 2 END AS ph
FROM phase_segments
WHERE date = getvariable('partition_date') AND source = 'power' AND endpoint = $endpoint AND host = $host AND gpu = $gpu
  AND start_ts IS NOT NULL AND end_ts IS NOT NULL
"""
_LABELS = pa.array(["idle", "decode", "prefill"], pa.string())
_TIMELINE_SCHEMA = pa.schema([  # without the date (the write adds it); strings dictionary-encoded (read as VARCHAR)
    ("endpoint", pa.dictionary(pa.int32(), pa.string())), ("host", pa.dictionary(pa.int32(), pa.string())), ("gpu", pa.uint8()),
    ("ts", pa.timestamp("us", tz="UTC")), ("power_w", pa.float32()), ("energy_j", pa.float64()),
    ("n_prefill", pa.int32()), ("n_decode", pa.int32()), ("phase", pa.dictionary(pa.int32(), pa.string())),
    ("prefill_estimated", pa.bool_()), ("prompt_tokens", pa.float64()), ("output_tokens", pa.float64()),
    ("power_phase", pa.dictionary(pa.int32(), pa.string())),
])


def _label(code: np.ndarray) -> pa.DictionaryArray:
    """Label codes (0 idle, 1 decode, 2 prefill, −1 NULL) as a dictionary column."""
    return pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32), mask=code < 0), _LABELS)


def _filled(values: np.ndarray, hit: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``values[at]`` where ``hit``, zero (false) elsewhere: the SQL's coalesce over its LEFT JOIN."""
    out = np.zeros(len(hit), values.dtype)
    out[hit] = values[at]
    return out


def _timeline_batches(cur, has_segments: bool) -> Iterator[pa.RecordBatch]:
    """phase_timeline's rows, one endpoint GPU at a time in the SQL's order (gk, slot), on ``cur``
    (the connection _timeline_prepare ran on: its temp tables): the GPU's power_100ms rows read
    in file order (the part is sorted by host, gpu, ts) and interpolated across short gaps
    (kernels.interpolated_slots), its endpoint's request state (_phase_ep_state) read once per
    endpoint and looked up by key, its power runs (phase_segments) labelled onto its slots
    (kernels.max_label_on_slots). Memory: one GPU-day's slots and one endpoint's state."""
    gpus = cur.execute(
        "SELECT ek, endpoint, host, gpu, ek IN (SELECT ek FROM _phase_logged), from_ns, to_ns FROM _phase_gpus ORDER BY gk"
    ).fetchall()
    day_first = cur.execute("SELECT day_first_slot()").fetchone()[0]
    state_of: tuple = (None, {})  # (ek, its state): GPUs come endpoint by endpoint
    for ek, endpoint, host, gpu, logged, from_ns, to_ns in gpus:
        with kernels.in_file_order(cur):
            p = cur.execute(_TIMELINE_POWER, {"host": host, "gpu": gpu}).fetchnumpy()
        if not len(p["slot"]):
            continue
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
            continue
        if state_of[0] != ek:
            state_of = (ek, cur.execute(_TIMELINE_STATE, {"lo": ek * EKEY_SLOTS, "hi": (ek + 1) * EKEY_SLOTS}).fetchnumpy())
        st = state_of[1]
        key = ek * EKEY_SLOTS + (slot - day_first)
        at = np.minimum(np.searchsorted(st["ekey"], key), max(len(st["ekey"]) - 1, 0))
        hit = (st["ekey"][at] == key) if len(st["ekey"]) else np.zeros(n, bool)
        at = at[hit]
        pick = {c: _filled(st[c], hit, at) for c in ("n_prefill", "n_decode", "prefill_estimated", "prompt_tokens", "output_tokens", "ph")}
        ph = pick["ph"]
        phase = np.where(ph == 2, 2, np.where(ph == 1, 1, 0)) if logged else np.full(n, -1)
        power_phase = np.full(n, -1, np.int8)
        if has_segments:
            runs = cur.execute(_TIMELINE_POWER_RUNS, {"endpoint": endpoint, "host": host, "gpu": gpu}).fetchnumpy()
            power_phase = kernels.max_label_on_slots(slot, runs["first"].astype(np.int64), runs["last"].astype(np.int64),
                                                     runs["ph"].astype(np.int8), 3)
        yield pa.record_batch({
            "endpoint": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([endpoint])),
            "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([host])),
            "gpu": pa.array(np.full(n, gpu, np.uint8)),
            "ts": pa.array(slot * (kernels.SLOT_NS // 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "power_w": power_w.astype(np.float32),
            "energy_j": power_w * 0.1,
            "n_prefill": pick["n_prefill"],
            "n_decode": pick["n_decode"],
            "phase": _label(phase),
            "prefill_estimated": pick["prefill_estimated"],
            "prompt_tokens": pick["prompt_tokens"],
            "output_tokens": pick["output_tokens"],
            "power_phase": _label(power_phase),
        }, schema=_TIMELINE_SCHEMA)


def timeline_by_gpu(con, write) -> int:
    """phase_timeline's write: sql/phase_timeline/phase_timeline.sql's final query (and its
    _phase_power_slots) as a numpy kernel, one endpoint GPU at a time (_timeline_batches)
    streaming into the part; the endpoint state is still the SQL's (_timeline_prepare, on a
    second connection: ``con`` runs the write's COPY). Identical rows (tests/test_phases.py)."""
    cur = kernels.second_connection(con)
    try:
        present = _timeline_prepare(cur)
        return kernels.write_stream(con, write, "phase_timeline", _TIMELINE_SCHEMA, _timeline_batches(cur, "phase_segments" in present))
    finally:
        cur.close()


BOUNDARIES_SQL = """
SELECT t FROM (SELECT start_ns AS t FROM _pi WHERE endpoint = $endpoint UNION SELECT end_ns FROM _pi WHERE endpoint = $endpoint) ORDER BY t
"""


def intervals(con, write) -> int:
    """phase_intervals' statements (the sweep: temp tables _pi_gpus, _pi_windows, _pi_span, _pi), then
    temp table `_pi_energy` (endpoint, t, e_j: the endpoint's cumulative energy, all its GPUs each
    while it held it, at each interval boundary) one endpoint and GPU window at a time: each GPU's curve read once and searched for the sorted
    boundaries (curve.Curve.energy_at), instead of an ASOF join that sorts the cluster-day's curve;
    then the partition written."""
    prepare, query = statements("phase_intervals/phase_intervals")
    for statement in prepare:
        con.execute(statement)
    con.execute("CREATE OR REPLACE TEMP TABLE _pi_energy (endpoint VARCHAR, t BIGINT, e_j DOUBLE)")
    windows: dict[str, list] = {}
    for endpoint, host, gpu, from_ns, to_ns in con.execute(
        "SELECT endpoint, host, gpu, from_ns, to_ns FROM _pi_windows ORDER BY ALL"
    ).fetchall():
        windows.setdefault(endpoint, []).append((host, gpu, from_ns, to_ns))
    bounds = {endpoint: con.sql(BOUNDARIES_SQL, params={"endpoint": endpoint}).fetchnumpy()["t"].astype(np.int64)
              for endpoint in windows}
    energy = {endpoint: np.zeros(len(t)) for endpoint, t in bounds.items()}
    held: dict[tuple[str, int], list] = {}  # per GPU, its windows in (endpoint, from_ns) order
    for endpoint, members in windows.items():
        for host, gpu, from_ns, to_ns in members:
            held.setdefault((host, gpu), []).append((endpoint, from_ns, to_ns))
    # each host read once, one GPU's curve at a time; an endpoint's GPUs still add up in
    # (host, gpu, from_ns) order, so its sums are the same floats
    for host, gpu, c in curve.curves(con, held):
        for endpoint, from_ns, to_ns in held[(host, gpu)]:  # each GPU counts only while the endpoint held it
            energy[endpoint] += c.energy_at(np.clip(bounds[endpoint], from_ns, to_ns))
    for endpoint, t in bounds.items():
        with registered(con, "_pi_energy_frame", pl.DataFrame({"endpoint": endpoint, "t": t, "e_j": energy[endpoint]})):
            con.execute("INSERT INTO _pi_energy SELECT * FROM _pi_energy_frame")
    return write(query)


GPUS_SQL = """
-- one row (key gk) per endpoint GPU and time the endpoint held it this day (held_gpus)
CREATE OR REPLACE TEMP TABLE _phase_gpus AS
SELECT name AS endpoint, host, gpu, tdp_w::DOUBLE AS tdp_w, from_ns, to_ns,
       row_number() OVER (ORDER BY name, host, gpu, from_ns) AS gk
FROM held_gpus('endpoint')
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

POWER_GPUS_SCHEMA = {
    "gk": pl.Int64, "source": pl.String, "is_average": pl.Boolean, "sample_interval_ms": pl.Float64, "unresolved": pl.String,
}
SEGMENTS_SCHEMA = {
    "gk": pl.Int64, "src": pl.Int32, "ph": pl.Int32, "lo": pl.Int64, "hi": pl.Int64, "energy_j": pl.Float64,
    "mean_w": pl.Float64, "peak_w": pl.Float64, "prompt_tokens": pl.Float64, "output_tokens": pl.Float64,
}


def source_stats(c: curve.Curve, gk: int, tdp_w: float | None = None) -> dict:
    """The GPU's power source of the day (the one with most samples in its curve ``c``), whether it is a
    1 s average and the median spacing of its samples (ms); why its workload cannot be segmented
    from power alone (power_detect.unresolved; None where it can). Marks the source's rows (``c.mine``)."""
    found = curve.curve_sources(c)
    if not found:
        return {}
    best, _, is_average = found[0]
    if len(found) > 1:  # one source: every row is its
        c.mine = c.source_id == c.source_names.index(best)
    gaps = (c.next_t_ns - c.t_ns)[c.mine & c.has_next]
    interval_ms = float(np.median(gaps)) / 1e6 if len(gaps) else None
    unresolved = None
    if not is_average and interval_ms is not None and interval_ms <= power_detect.PREFILL_RESOLVABLE_MS and tdp_w is not None:
        unresolved = power_detect.unresolved(c.t_ns, c.power_w, float(tdp_w), int(interval_ms * 1e6))
    return {"gk": gk, "source": best, "is_average": bool(is_average), "sample_interval_ms": interval_ms, "unresolved": unresolved}


def _gpus_by_curve(con, rows: list[tuple]) -> Iterator[tuple[tuple, curve.Curve]]:
    """Each row of ``rows`` (gk, endpoint, host, gpu, ...) with its GPU's curve, GPU by GPU in
    (host, gpu) order, gk order within a GPU: each host's samples read once (curve.curves), one
    GPU's curve in memory."""
    of_gpu: dict[tuple[str, int], list[tuple]] = {}
    for row in rows:
        of_gpu.setdefault((row[2], row[3]), []).append(row)
    for host, gpu, c in curve.curves(con, of_gpu):
        for row in of_gpu[(host, gpu)]:
            yield row, c


def _power_gpus_table(con, stats: list[dict]) -> None:
    """Temp table `_power_gpus`: per endpoint GPU with power, its source, sample interval and
    whether power-only detection can resolve prefills there."""
    with registered(con, "_power_gpus_frame", pl.DataFrame(stats, schema=POWER_GPUS_SCHEMA)):
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _power_gpus AS "
            "SELECT g.endpoint, g.host, g.gpu, g.gk, g.tdp_w, s.source, s.is_average, s.sample_interval_ms, s.unresolved, "
            "NOT s.is_average AND s.sample_interval_ms <= ? AND s.unresolved IS NULL AS resolvable "
            "FROM _phase_gpus AS g JOIN _power_gpus_frame AS s USING (gk) ORDER BY g.gk",
            [power_detect.PREFILL_RESOLVABLE_MS],
        )


def power_gpus(con) -> None:
    """Temp tables `_phase_gpus` (endpoint GPUs with integer keys) and `_power_gpus` (source_stats of
    each), reading each GPU's curve once."""
    con.execute(GPUS_SQL)
    rows = con.execute("SELECT gk, endpoint, host, gpu, tdp_w FROM _phase_gpus ORDER BY gk").fetchall()
    stats = [source_stats(c, gk, tdp_w) for (gk, _, _, _, tdp_w), c in _gpus_by_curve(con, rows)]
    _power_gpus_table(con, sorted((s for s in stats if s), key=lambda s: s["gk"]))


def segments(con) -> None:
    """phase_segments' kernel (before= hook): temp tables `_phase_gpus`, `_power_gpus` and `_segments`
    (gk, src 0 requests / 1 power, ph, lo, hi, energy_j, mean_w, peak_w, tokens), one GPU at a time:
    its curve built once from its host's one read (curve.curves), the power-only detector on its samples
    (pipeline/phases/power_detect.py) where its source resolves prefills, the energies of both
    sources' runs as E(hi) − E(lo) and the request runs' peaks by sorted searches on that curve.
    Memory: one GPU-day's curve, its segments (appended to the temp table GPU by GPU) and its
    endpoint's request runs."""
    con.execute(GPUS_SQL)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _segments (gk BIGINT, src INTEGER, ph INTEGER, lo BIGINT, hi BIGINT, energy_j DOUBLE, "
        "mean_w DOUBLE, peak_w DOUBLE, prompt_tokens DOUBLE, output_tokens DOUBLE)"
    )
    stats = []
    gpus = con.execute("SELECT gk, endpoint, host, gpu, tdp_w, from_ns, to_ns FROM _phase_gpus ORDER BY gk").fetchall()
    runs_of: tuple = (None, None)  # ((endpoint, holding), its request runs): GPUs come endpoint by endpoint
    for (gk, endpoint, _, _, tdp_w, from_ns, to_ns), c in _gpus_by_curve(con, gpus):
        st = source_stats(c, gk, tdp_w)
        frames = []
        if runs_of[0] != (endpoint, from_ns, to_ns):
            runs_of = ((endpoint, from_ns, to_ns), arrow_frame(con.sql(
                REQUEST_RUNS_SQL, params={"endpoint": endpoint, "lo": from_ns, "hi": to_ns}).to_arrow_table()))
        r = runs_of[1]
        if len(r):
            lo, hi = r["lo"].to_numpy(), r["hi"].to_numpy()
            e = c.energy_at(np.concatenate([lo, hi]))
            energy = e[len(lo):] - e[: len(lo)]
            p = c.power_at(np.concatenate([lo, hi]))
            peak = np.fmax(np.fmax(c.peak_in(lo, hi), p[: len(lo)]), p[len(lo):])
            frames.append(pl.DataFrame({
                "gk": np.full(len(lo), gk), "src": 0, "ph": r["ph"].to_numpy(), "lo": lo, "hi": hi, "energy_j": energy,
                "mean_w": energy / ((hi - lo) / 1e9), "peak_w": peak,
                "prompt_tokens": r["prompt_tokens"].to_numpy(), "output_tokens": r["output_tokens"].to_numpy(),
            }, schema=SEGMENTS_SCHEMA, nan_to_null=True))
        if st:
            stats.append(st)
            ms = st["sample_interval_ms"]
            if not st["is_average"] and ms is not None and ms <= power_detect.PREFILL_RESOLVABLE_MS:
                # the GPU's samples while the endpoint held it: a slice, the curve is in time order
                a, b = np.searchsorted(c.t_ns, [from_ns, to_ns], side="left")
                t_held, w_held = c.t_ns[a:b], c.power_w[a:b]
                runs = power_detect.detect_gpu(gk, t_held, w_held, float(tdp_w), power_detect.ONSET_LEAD_NS.get(st["source"], 0),
                                               st["source"] in power_detect.TRAILING_SOURCES, prefill=st["unresolved"] is None)
                lo, hi = runs["lo"].to_numpy(), runs["hi"].to_numpy()
                e = c.energy_at(np.concatenate([lo, hi]))
                energy = e[len(lo):] - e[: len(lo)]
                frames.append(pl.DataFrame({
                    "gk": runs["gk"], "src": 1, "ph": runs["ph"].cast(pl.Int32), "lo": lo, "hi": hi, "energy_j": energy,
                    "mean_w": energy / ((hi - lo) / 1e9), "peak_w": runs["peak_w"], "prompt_tokens": None, "output_tokens": None,
                }, schema=SEGMENTS_SCHEMA))
        if frames:
            with registered(con, "_segments_frame", pl.concat(frames)):
                con.execute("INSERT INTO _segments SELECT * FROM _segments_frame")
    _power_gpus_table(con, sorted(stats, key=lambda s: s["gk"]))


CONTINUOUS_BATCHING_MS = 45.0
"""Half of h200-capture-4's median prefill (90 ms, continuous batching): samples at most this far
apart resolve such prefills (pipeline/phases/power_detect.py: PREFILL_RESOLVABLE_MS)."""


def power_resolution(con, build: bool = True) -> dict:
    """Per endpoint and power source (`_power_gpus`, built unless ``build`` is false): the samples'
    spacing and whether power alone can resolve prefills there (a 1 s average or samples over 300 ms
    apart cannot: say so rather than guess)."""
    if build:
        power_gpus(con)
    out: dict = {}
    rows = con.execute(
        "SELECT endpoint, source, bool_or(is_average), median(sample_interval_ms), bool_and(resolvable), min(unresolved) "
        "FROM _power_gpus GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
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
    write=intervals,
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
    before=segments,
    python_checks=(
        PythonCheck(
            "power_segmentation_agreement",
            "Power-only prefill detection agrees with the request log (precision ≥ 0.7 and recall ≥ 0.5 of prefill time; "
            "median boundary error and energy recall reported).",
            checks.power_segmentation_agreement,
        ),
    ),
    python_headline=lambda con: {"power_resolution": MetadataValue.json(power_resolution(con, build=False))},
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
    write=timeline_by_gpu,
    python_checks=(
        PythonCheck(
            "clock_skew",
            "Request timestamps line up with the power trace (prefill-spike cross-correlation; WARN if offset ≥ 0.5 s).",
            checks.clock_skew,
        ),
    ),
)
(phase_timeline,) = table_assets(PHASE_TIMELINE)
