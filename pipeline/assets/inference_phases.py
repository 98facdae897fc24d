"""Inference phases: `phase_intervals` (the exact timeline, in event time: intervals between
consecutive request events), `phase_segments` (runs of one label, from the request log in event
time and from power alone: the detector of pipeline/phases/power_detect.py on each GPU's own
samples) and `phase_timeline` (the 100 ms grid, derived: charts, the power-only label per slot, the
clock-skew check)."""

import polars as pl
from dagster import MetadataValue

from pipeline.kernels import arrow_frame
from pipeline.phases import checks, power_detect
from pipeline.tables import PythonCheck, Table, statements, table_assets

ENDPOINTS_PER_CHUNK = 4
"""phase_timeline sweeps the request log this many endpoints at a time: a 64-GPU cluster-day of 16
endpoints needs more than 1.1 GiB in one sweep, a chunk of 4 a quarter of that."""


def timeline_in_chunks(con, write) -> int:
    """phase_timeline's statements, the request sweep run ENDPOINTS_PER_CHUNK endpoints at a time
    (the statements that read ``getvariable('phase_chunk')``), then the partition written."""
    prepare, query = statements("phase_timeline/phase_timeline")
    present = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    if "phase_segments" not in present:
        # not built for any day yet (a selection without it): no power-only labels (power_phase NULL)
        con.execute(
            "CREATE OR REPLACE TEMP VIEW phase_segments AS SELECT NULL::DATE AS date, NULL::VARCHAR AS endpoint, NULL::VARCHAR AS host, "
            "NULL::UTINYINT AS gpu, NULL::VARCHAR AS phase, NULL::VARCHAR AS source, NULL::TIMESTAMPTZ AS start_ts, NULL::TIMESTAMPTZ AS end_ts WHERE false"
        )
    n_endpoints = con.execute("SELECT count(DISTINCT endpoint) FROM inventory_gpus").fetchone()[0]
    chunks = max(1, -(-n_endpoints // ENDPOINTS_PER_CHUNK))
    con.execute("SET VARIABLE phase_chunks = ?", [chunks])
    for statement in prepare:
        if "getvariable('phase_chunk')" not in statement:
            con.execute(statement)
            continue
        for chunk in range(chunks):
            con.execute("SET VARIABLE phase_chunk = ?", [chunk])
            con.execute(statement)
    return write(query)


POWER_GPUS_SQL = """
-- per endpoint GPU: its power source of the day (the one with most samples in energy_curve), the
-- median spacing of its samples and whether power-only detection can resolve prefills there
CREATE OR REPLACE TEMP TABLE _power_gpus AS
WITH gpus AS (
    SELECT endpoint, host, gpu, tdp_w, row_number() OVER (ORDER BY endpoint, host, gpu) AS gk
    FROM inventory_gpus WHERE endpoint IS NOT NULL
),
by_source AS (
    SELECT c.host, c.gpu, c.source::VARCHAR AS source, count(*) AS n, bool_or(c.is_average) AS is_average,
           median(c.next_t_ns - c.t_ns) / 1e6 AS sample_interval_ms
    FROM energy_curve AS c WHERE c.date = getvariable('partition_date') GROUP BY ALL
)
SELECT g.endpoint, g.host, g.gpu, g.gk, g.tdp_w, s.source, s.is_average, s.sample_interval_ms,
       NOT s.is_average AND s.sample_interval_ms <= getvariable('prefill_resolvable_ms') AS resolvable
FROM gpus AS g
JOIN (SELECT host, gpu, arg_max(source, n) AS source, arg_max(is_average, n) AS is_average,
             arg_max(sample_interval_ms, n) AS sample_interval_ms
      FROM by_source GROUP BY ALL) AS s USING (host, gpu)
"""

POWER_SAMPLES_SQL = """
SELECT g.gk, c.t_ns, c.power_w::DOUBLE AS power_w, g.tdp_w::DOUBLE AS tdp_w
FROM energy_curve AS c JOIN _power_gpus AS g USING (host, gpu)
WHERE c.date = getvariable('partition_date') AND g.gk = $gk
ORDER BY c.t_ns
"""


def power_gpus(con) -> None:
    """Temp table `_power_gpus` (POWER_GPUS_SQL)."""
    con.execute("SET VARIABLE prefill_resolvable_ms = ?", [power_detect.PREFILL_RESOLVABLE_MS])
    con.execute(POWER_GPUS_SQL)


def power_runs(con) -> None:
    """Temp tables `_power_gpus` (per endpoint GPU: source, sample interval, resolvable) and
    `_power_runs` (gk, ph, lo, hi, peak_w): the power-only detector (pipeline/phases/power_detect.py)
    on each resolvable GPU's own samples, one GPU at a time (memory of one GPU-day's samples)."""
    power_gpus(con)
    frames = []
    for gk, source in con.execute("SELECT gk, source FROM _power_gpus WHERE resolvable ORDER BY gk").fetchall():
        samples = arrow_frame(con.sql(POWER_SAMPLES_SQL, params={"gk": gk}).to_arrow_table())
        frames.append(power_detect.detect(samples, power_detect.ONSET_LEAD_NS.get(source, 0), source in power_detect.TRAILING_SOURCES))
    runs = pl.concat(frames) if frames else pl.DataFrame(schema=power_detect.RUN_SCHEMA)
    con.register("_power_runs_arrow", runs.to_arrow())
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _power_runs AS SELECT * FROM _power_runs_arrow")
    finally:
        con.unregister("_power_runs_arrow")


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
        "SELECT endpoint, source, bool_or(is_average), median(sample_interval_ms), bool_and(resolvable) FROM _power_gpus GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
    for endpoint, source, is_average, interval_ms, resolvable in rows:
        if is_average:
            verdict = f"prefills cannot be resolved at {interval_ms:.0f} ms: the source is a 1 s average"
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
    "from energy_curve). The exact timeline request_energy and phase_segments use.",
    "cluster-day",
    deps=["energy_curve", "requests"],
    group="phases",
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
    before=power_runs,
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
    "label and the power-only label (`power_phase`, from phase_segments' native power runs). See "
    "docs/phases.md.",
    "cluster-day",
    deps=["power_100ms", "requests", "phase_segments"],
    group="phases",
    write=timeline_in_chunks,
    python_checks=(
        PythonCheck(
            "clock_skew",
            "Request timestamps line up with the power trace (prefill-spike cross-correlation; WARN if offset ≥ 0.5 s).",
            checks.clock_skew,
        ),
    ),
)
(phase_timeline,) = table_assets(PHASE_TIMELINE)
