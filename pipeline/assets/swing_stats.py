"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous trace and on the driver's 1 s average; and
`fleet_power_grid`, the host-and-above series the swings use when the grid step (setting
``grid_step_ms``) is not the 100 ms of `fleet_power_100ms`.

Both are Python tables (``Table(rows=...)``): numpy kernels over whole day series, which SQL says
badly (its sliding windows over sample times cost ~200x more). The SQL that once defined
swing_stats is a test oracle now (tests/oracles/swing_stats.sql, held equal to these rows by
tests/test_power_swings.py)."""

import datetime as dt
import hashlib
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa

from collectors.settings import DEFAULT_GRID_STEP_MS
from pipeline.grid import DAY_NS, Windows, carried_slots, grid_max_swing, grid_stats, grid_windows, summed_series, window_rows
from pipeline.kernels import best_samples, in_file_order, second_connection, series_swings
from pipeline.phases.curve import Curve, host_curves
from pipeline.series_run import run_curves
from pipeline.tables import Connection, Table, TableRun, table_assets

WINDOWS_S = (1, 2, 10, 60)

SCHEMA = pa.schema([
    ("date", pa.date32()), ("level", pa.string()), ("entity", pa.string()), ("window_s", pa.int32()), ("series", pa.string()),
    ("max_swing_w", pa.float32()), ("max_swing_pct", pa.float32()), ("p50_swing_w", pa.float32()), ("p99_swing_w", pa.float32()),
    ("max_ramp_w_per_s", pa.float32()), ("windows_over_10pct", pa.int64()), ("windows_over_25pct", pa.int64()),
    ("provisioned_w", pa.float64()), ("windows_complete", pa.int64()), ("windows_incomplete", pa.int64()),
    ("grid_step_ms", pa.int32()), ("sample_interval_ms", pa.float32()),
])
"""swing_stats' rows, in the stored column order; watts and the sample interval as 32-bit floats
(the stored precision of power), computed in double and rounded once."""

GRID_SCHEMA = pa.schema([
    ("date", pa.date32()), ("level", pa.string()), ("entity", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
    ("power_w", pa.float64()), ("gpus_reporting", pa.int32()), ("complete", pa.bool_()), ("grid_step_ms", pa.int32()),
    ("carried_ms", pa.int32()), ("ahead_ms", pa.int32()),
])
"""fleet_power_grid's rows, in the stored column order."""


_GPU_SLOTS = """
SELECT gpu, slot_100ms(ts) AS slot, CASE WHEN is_average THEN NULL ELSE power_w END::DOUBLE AS p, power_avg_w::DOUBLE AS pa,
       source = 'dcgm' AS dcgm
FROM power_100ms WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu
"""


def _native(series: str, t_ns: np.ndarray, p: np.ndarray) -> dict[tuple[str, int], tuple[float, float | None]]:
    """A GPU series' max swing per window on its raw samples, exact over sample times (kernels.series_swings)."""
    return {(series, w): (mx, ms) for w, mx, ms in series_swings(t_ns, p.astype(np.float64), WINDOWS_S)}


def _native_of(cv: Curve) -> dict[tuple[str, int], tuple[float, float | None]]:
    """_native of both series of a GPU's curve: the instant series on its rows that are not 1 s
    averages (the stored FLOAT power, widened once; no copy where every row is instantaneous), the
    avg1s series on its 1 s-average trace."""
    t, p = cv.t_ns, cv.power_w32
    if cv.is_average.any():
        keep = ~cv.is_average
        t, p = t[keep], p[keep]
    return _native("instant", t, p) | _native("avg1s", cv.avg_t_ns, cv.avg_w)


def _coarse_step_s(slot: np.ndarray, dcgm: np.ndarray) -> float | None:
    """A dcgm-exporter GPU's sampling step (s): the median spacing of its dcgm slots (quantile_disc, as
    the SQL's _coarse), None for other sources. Windows shorter than two steps are left out."""
    gaps = np.sort(np.diff(slot[dcgm]))
    return float(gaps[max(1, int(np.ceil(len(gaps) * 0.5))) - 1]) / 10.0 if len(gaps) else None


def _refresh_step_s(bin_: np.ndarray, carried: np.ndarray, ok: np.ndarray) -> float | None:
    """The sampling step (s) of a host-and-above 1 s-average series on the 100 ms grid: the median
    spacing of the slots where its oldest summed value was refreshed (its age, ``carried``, did not
    grow by one slot; quantile_disc, as the SQL's _coarse_upper). Windows shorter than two steps hold
    at most one change of a 1 s average, which is not a swing: they are left out, as for the GPUs."""
    order = np.argsort(bin_[ok], kind="stable")
    b, c = bin_[ok][order], carried[ok][order]
    if len(b) < 2:
        return None
    fresh = np.r_[True, (np.diff(b) != 1) | (c[1:] <= c[:-1])]
    gaps = np.sort(np.diff(b[fresh]))
    return float(gaps[max(1, int(np.ceil(len(gaps) * 0.5))) - 1]) / 10.0 if len(gaps) else None


def _gpu_rows(host: str, gpu: int, provisioned_w: float, slot: np.ndarray, p: np.ndarray, pa: np.ndarray, dcgm: np.ndarray,
              native: dict, first_slot: int) -> list[dict]:
    """One GPU's swing_stats rows: grid statistics on its 100 ms slots (the carry rule filling empty
    ones: grid.carried_slots; a window leaves out values carried from before it), the max swing of
    its raw samples where it has them."""
    bins = DAY_NS // 100_000_000
    extra, source = carried_slots(slot, first_slot + bins)
    at = np.r_[slot, extra] - first_slot
    carried = np.zeros(bins, dtype=np.int64)
    carried[extra - first_slot] = extra - slot[source]
    step_s = _coarse_step_s(slot, dcgm)
    out = []
    for series, v in (("instant", np.r_[p, p[source]]), ("avg1s", np.r_[pa, pa[source]])):
        values, ok = np.zeros(bins), np.zeros(bins, dtype=bool)
        values[at], ok[at] = np.nan_to_num(v), ~np.isnan(v)
        for row in grid_stats(values, ok, DEFAULT_GRID_STEP_MS, WINDOWS_S, provisioned_w, slide=False, carried=carried):
            w = row["window_s"]
            if step_s is not None and w < 2 * step_s:
                continue
            mx, interval_ms = native.get((series, w), (None, None))
            if mx is None:  # no raw samples of this series: the grid's own sliding windows
                mx = grid_max_swing(values, ok, w * 1000 // DEFAULT_GRID_STEP_MS, carried)
            out.append({"level": "gpu", "entity": f"{host}/{gpu}", "series": series, **row, "max_swing_w": mx,
                        "grid_step_ms": DEFAULT_GRID_STEP_MS, "sample_interval_ms": interval_ms})
    return out


def gpu_swings(con: Connection) -> list[dict]:
    """swing_stats' rows of every GPU: max swing per window on its raw samples (the instant series
    on energy_curve's best-source samples, the avg1s series on the rows of the best source that
    reports a 1 s average, as kernels.best_samples selects them), exact over sample times; p50/p99,
    ramp and window counts on its 100 ms slots with the carry rule (tests/test_power_swings.py holds
    them to the SQL oracle). Each GPU's curve from the run's cache, else each host's samples read
    once (curve.host_curves), one GPU at a time (memory: a GPU-day's curve and its slots; its
    instants and stored FLOAT power are all the swings read of the curve)."""
    provisioned = {e: w for e, w in con.execute("SELECT entity, provisioned_w FROM inventory_entities WHERE level = 'gpu'").fetchall()}
    first_slot = con.execute("SELECT day_first_slot()").fetchall()[0][0]
    gpus: dict[str, list[int]] = {}
    for host, gpu in con.execute(
        "SELECT DISTINCT host, gpu FROM power_100ms WHERE date = getvariable('partition_date') ORDER BY 1, 2").fetchall():
        if f"{host}/{gpu}" in provisioned:  # GPUs missing from the inventory are left out (power_1s' check names them)
            gpus.setdefault(host, []).append(gpu)
    out: list[dict] = []
    for host, host_gpus in gpus.items():
        curves = host_curves(con, host, host_gpus, with_avg=True)  # the run's cache, else the host's samples read once
        got = next(curves, None)
        for gpu in host_gpus:
            if got is not None and got[0] == gpu:
                cv, got = got[1], None
                native = _native_of(cv)
                del cv  # one GPU's curve in memory
                got = next(curves, None)
            else:
                t, p, _ = best_samples(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.uint8))
                native = _native("avg1s", t, p)
            with in_file_order(con):  # power_100ms' part is sorted by (host, gpu, ts); one GPU's slots at a time
                slots = con.sql(_GPU_SLOTS, params={"host": host, "gpu": gpu}).fetchnumpy()
            slot = np.asarray(slots["slot"])
            mine = np.arange(len(slot))
            if len(slot) > 1 and not bool((slot[1:] > slot[:-1]).all()):
                order = np.argsort(slot, kind="stable")
                mine, slot = mine[order], slot[order]
            p_grid, pa_grid = (np.ma.filled(np.ma.asarray(slots[c])[mine].astype(np.float64), np.nan) for c in ("p", "pa"))
            rows = _gpu_rows(host, gpu, float(provisioned[f"{host}/{gpu}"]), slot, p_grid, pa_grid,
                             np.ma.filled(np.ma.asarray(slots["dcgm"])[mine], False).astype(bool), native, first_slot)
            del slots, p_grid, pa_grid  # before the next GPU's
            out += [{**r, "provisioned_w": provisioned[r["entity"]]} for r in rows]
    return out


def _entity_series(con: Connection, table: str, step: int, columns: str, rollup: bool) -> Iterator[tuple[str, str, float, dict[str, np.ndarray]]]:
    """Each host-and-above entity of ``table`` (fleet_power_100ms or fleet_power_grid; a fleet-day
    rollup: its role and fleet only) with its provisioned power and its stored bins (``bin`` on the
    ``step`` grid, then ``columns``), one entity at a time (a filtered read each: cheaper than
    splitting one read by the string keys)."""
    levels = "AND g.level IN ('role', 'fleet')" if rollup else ""
    entities = con.execute(
        f"""SELECT DISTINCT g.level, g.entity, e.provisioned_w FROM {table} AS g JOIN inventory_entities AS e USING (level, entity)
            WHERE g.date = getvariable('partition_date') {levels} ORDER BY 1, 2"""
    ).fetchall()
    for level, entity, provisioned_w in entities:
        yield level, entity, provisioned_w, con.sql(
            f"""SELECT (epoch_us(ts) - epoch_us(day_start())) // ($step * 1000) AS bin, {columns}
                FROM {table} WHERE date = getvariable('partition_date') AND level = $level AND entity = $entity""",
            params={"step": step, "level": level, "entity": entity},
        ).fetchnumpy()


def _stored_step(con: Connection, step: int) -> None:
    """fleet_power_grid of this day must be on the setting's grid (it is built before swing_stats)."""
    try:
        stored = {s for (s,) in con.execute(
            "SELECT DISTINCT grid_step_ms FROM fleet_power_grid WHERE date = getvariable('partition_date')").fetchall()}
    except duckdb.CatalogException:
        raise RuntimeError(f"swing_stats at a {step} ms grid reads fleet_power_grid, which is not built: materialize it first") from None
    if stored - {step}:
        raise RuntimeError(f"fleet_power_grid of this day is on a {sorted(stored)} ms grid, the setting is {step} ms: "
                           "materialize fleet_power_grid again before swing_stats")


class SharedSeries:
    """The window statistics of the series swung so far above the host, by content: a level whose
    members are the same GPUs as another's (a one-host cluster and its host, a one-role cluster and
    its role, a one-cluster fleet's role and fleet) sums the same values into the same series, which
    is then swung once. A lookup compares a cheap summary first and hashes the inputs (values, bins
    complete, carried and ahead reach, step) only when it matches; hosts are looked up, never kept,
    so what is kept is a few series' aligned swings (~1 MB each)."""

    def __init__(self) -> None:
        self._seen: dict[tuple, list[tuple[bytes, list[Windows]]]] = {}

    @staticmethod
    def _digest(step: int, *arrays: np.ndarray | None) -> bytes:
        h = hashlib.blake2b(str(step).encode(), digest_size=32)
        for a in arrays:
            h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
            h.update(b"|")
        return h.digest()

    def windows(self, keep: bool, values: np.ndarray, ok: np.ndarray, step: int, carried: np.ndarray | None,
                ahead: np.ndarray | None) -> list[Windows]:
        """grid.grid_windows of the series (sliding), computed once per distinct series; ``keep``:
        remember it for the entities still to come."""
        summary = (step, len(values), int(ok.sum()), float(values.sum()))
        candidates = self._seen.get(summary, [])
        digest = self._digest(step, values, ok, carried, ahead) if candidates or keep else b""
        for seen, windows in candidates:
            if seen == digest:
                return windows
        windows = grid_windows(values, ok, step, WINDOWS_S, carried=carried, ahead=ahead)
        if keep:
            self._seen.setdefault(summary, []).append((digest, windows))
        return windows


def _entity_rows(shared: SharedSeries, level: str, entity: str, provisioned_w: float, series: str, bin_: np.ndarray, value: np.ndarray,
                 ok: np.ndarray, step: int, carried_bins: np.ndarray | None = None, ahead_bins: np.ndarray | None = None) -> list[dict]:
    """swing_stats' grid columns of one entity's series, on its dense day series (complete where
    ``ok``; ``carried_bins``: how many bins back each bin's oldest value was sampled; ``ahead_bins``:
    how many bins after it lies a sample its value leans on)."""
    bins = DAY_NS // (step * 1_000_000)
    values, complete = np.zeros(bins), np.zeros(bins, dtype=bool)
    values[bin_], complete[bin_] = np.where(ok, value, 0.0), ok
    carried = ahead = None
    if carried_bins is not None:
        carried = np.zeros(bins, dtype=np.int64)
        carried[bin_] = carried_bins
    if ahead_bins is not None:
        ahead = np.zeros(bins, dtype=np.int64)
        ahead[bin_] = ahead_bins
    windows = shared.windows(level != "host", values, complete, step, carried, ahead)
    return [{"level": level, "entity": entity, "series": series, **row, "grid_step_ms": step}
            for row in window_rows(windows, float(provisioned_w))]


def _filled(x) -> tuple[np.ndarray, np.ndarray]:
    """A fetched column as float64 values and where they are not NULL."""
    m = np.ma.asarray(x)
    return np.ma.filled(m.astype(np.float64), 0.0), ~np.ma.getmaskarray(m)


def grid_swings(con: Connection, step: int, rollup: bool) -> list[dict]:
    """swing_stats' rows of the host, cluster, role and fleet (a fleet-day rollup: role and fleet),
    each entity's dense day series swung by pipeline/grid.py's grid_windows (polars rolling max/min:
    exact sliding windows over complete bins), once per distinct series (SharedSeries). The avg1s
    series on fleet_power_100ms; the instant
    series on fleet_power_100ms at the default step, on fleet_power_grid at another. Row for row
    what the SQL oracle computes for these levels (tests/test_power_swings.py), at a fraction of its
    cost. ``step``: the grid_step_ms setting."""
    out: list[dict] = []
    shared = SharedSeries()
    columns = "power_w, power_avg_w, complete, complete_avg1s, carried_ms, power_best_w, complete_best"
    for level, entity, provisioned_w, x in _entity_series(con, "fleet_power_100ms", DEFAULT_GRID_STEP_MS, columns, rollup):
        rows: list[dict] = []
        complete = np.ma.filled(np.ma.asarray(x["complete"]), False).astype(bool)
        complete_avg = np.ma.filled(np.ma.asarray(x["complete_avg1s"]), False).astype(bool)
        carried = np.ma.filled(np.ma.asarray(x["carried_ms"]), 0).astype(np.int64) // DEFAULT_GRID_STEP_MS
        if not complete.any() and not complete_avg.any():  # GPUs mixing instantaneous and 1 s-average sources
            best, has_best = _filled(x["power_best_w"])
            complete_best = np.ma.filled(np.ma.asarray(x["complete_best"]), False).astype(bool)
            rows += _entity_rows(shared, level, entity, provisioned_w, "mixed", x["bin"], best, complete_best & has_best, DEFAULT_GRID_STEP_MS, carried)
        else:
            avg, has_avg = _filled(x["power_avg_w"])
            step_s = _refresh_step_s(np.asarray(x["bin"]), carried, complete_avg & has_avg)
            rows += [row for row in _entity_rows(shared, level, entity, provisioned_w, "avg1s", x["bin"], avg, complete_avg & has_avg,
                                                 DEFAULT_GRID_STEP_MS, carried)
                     if step_s is None or row["window_s"] >= 2 * step_s]
        if step == DEFAULT_GRID_STEP_MS:
            inst, has_inst = _filled(x["power_w"])
            rows += _entity_rows(shared, level, entity, provisioned_w, "instant", x["bin"], inst, complete & has_inst, step, carried)
        out += [{**r, "provisioned_w": provisioned_w} for r in rows]
    if step != DEFAULT_GRID_STEP_MS:
        _stored_step(con, step)
        for level, entity, provisioned_w, x in _entity_series(con, "fleet_power_grid", step, "power_w, complete, carried_ms, ahead_ms", rollup):
            complete = np.ma.filled(np.ma.asarray(x["complete"]), False).astype(bool)
            inst, has_inst = _filled(x["power_w"])
            behind = np.ma.filled(np.ma.asarray(x["carried_ms"]), 0).astype(np.int64) // step
            ahead = np.ma.filled(np.ma.asarray(x["ahead_ms"]), 0).astype(np.int64) // step
            out += [{**r, "provisioned_w": provisioned_w}
                    for r in _entity_rows(shared, level, entity, provisioned_w, "instant", x["bin"], inst, complete & has_inst, step, behind, ahead)]
    return out


def _float32(rows: list[dict], column: str) -> pa.Array:
    """A column of doubles (None: null) rounded to FLOAT once, as DuckDB's ``::FLOAT`` does."""
    values = np.array([np.nan if r[column] is None else r[column] for r in rows], dtype=np.float64)
    return pa.array(values.astype(np.float32), mask=np.array([r[column] is None for r in rows], dtype=bool))


def swing_table(date: dt.date, rows: list[dict]) -> pa.Table:
    """swing_stats' part from the kernels' rows (level, entity, series, window_s, the swing columns
    in double, grid_step_ms, sample_interval_ms, provisioned_w): max_swing_pct added, sorted by
    level, entity, window and series."""
    rows = sorted(rows, key=lambda r: (r["level"], r["entity"], r["window_s"], r["series"]))
    for r in rows:
        r["max_swing_pct"] = None if r["max_swing_w"] is None else 100 * r["max_swing_w"] / r["provisioned_w"]
        r.setdefault("sample_interval_ms", None)
    columns = {
        "date": pa.array([date] * len(rows), pa.date32()),
        **{c: pa.array([r[c] for r in rows], SCHEMA.field(c).type)
           for c in ("level", "entity", "window_s", "series", "windows_over_10pct", "windows_over_25pct", "provisioned_w",
                     "windows_complete", "windows_incomplete", "grid_step_ms")},
        **{c: _float32(rows, c) for c in ("max_swing_w", "max_swing_pct", "p50_swing_w", "p99_swing_w", "max_ramp_w_per_s",
                                          "sample_interval_ms")},
    }
    return pa.table({name: columns[name] for name in SCHEMA.names}, schema=SCHEMA)


def swing_rows(con: Connection, run: TableRun) -> pa.Table:
    """swing_stats' part: a cluster-day's GPU rows and the levels above, or the fleet-day's role
    and fleet rows (from the rolled-up 100 ms series, and the rolled-up grid at another step)."""
    rows = [] if run.rollup else gpu_swings(con)
    rows += grid_swings(con, run.grid_step_ms, run.rollup)
    return swing_table(dt.date.fromisoformat(str(run.scope.date)), rows)


def grid_rows(con: Connection, run: TableRun) -> pa.RecordBatchReader:
    """fleet_power_grid's cluster-day part: the summed series on the ``grid_step_ms`` grid
    (pipeline/grid.py), streamed host by host and then entity by entity above; none at the default
    step, where fleet_power_100ms is the grid. The stream is read by the part's write, through
    ``con`` from a DuckDB thread where the cluster-day's scope cuts its rows: the kernel reads on a
    cursor of its own (kernels.second_connection) and gets the run's curve cache looked up here, in
    the step's thread (series_run.run_curves)."""
    step = run.grid_step_ms
    if step == DEFAULT_GRID_STEP_MS:
        return pa.RecordBatchReader.from_batches(GRID_SCHEMA, [])
    cur = second_connection(con)
    day_start_us = con.execute("SELECT epoch_us(day_start())").fetchall()[0][0]
    date = dt.date.fromisoformat(str(run.scope.date))
    frames = summed_series(cur, step, cache=run_curves())

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for frame in frames:
                n = frame.height
                ts = day_start_us + frame["bin"].to_numpy() * (step * 1000)
                yield pa.RecordBatch.from_arrays([
                    pa.array([date] * n, pa.date32()), frame["level"].to_arrow().cast(pa.string()),
                    frame["entity"].to_arrow().cast(pa.string()), pa.array(ts, GRID_SCHEMA.field("ts").type),
                    frame["power_w"].to_arrow(), frame["gpus_reporting"].to_arrow(), frame["complete"].to_arrow(),
                    pa.array(np.full(n, step, np.int32)), frame["carried_ms"].to_arrow(), frame["ahead_ms"].to_arrow(),
                ], schema=GRID_SCHEMA)
        finally:
            cur.close()

    return pa.RecordBatchReader.from_batches(GRID_SCHEMA, batches())


FLEET_POWER_GRID = Table(
    "fleet_power_grid",
    "Per bin of the grid_step_ms grid (only where that step is not 100 ms: at 100 ms "
    "fleet_power_100ms is the grid), summed exact mean power (W) of every host, cluster, role and "
    "fleet from energy_curve, GPUs covering the bin, and whether the bin is complete.",
    "cluster-day",
    deps=["energy_curve", "fleet_power_100ms"],
    group="swings",
    rows=grid_rows,
    grid_step=True,  # its check one_step.sql reads the setting
    rollup=True,  # role and fleet rows summed from the cluster-days' parts; complete when every part is
    rollup_deps=["fleet_power_grid", ["fleet", "fleet_power_100ms"]],
)
fleet_power_grid, fleet_fleet_power_grid = table_assets(FLEET_POWER_GRID)

SWING_STATS = Table(
    "swing_stats",
    "Per level, entity, window (1/2/10/60 s) and series (instant/avg1s): max swing in any sliding "
    "window (W and % of provisioned; GPUs: on their raw samples, other levels: on the grid of "
    "grid_step_ms), p50/p99 over aligned windows, max ramp between grid slots (W/s), aligned "
    "windows over 10%/25% of provisioned.",
    "cluster-day",
    deps=["power_100ms", "fleet_power_100ms", "energy_curve", "fleet_power_grid"],
    group="swings",  # with the grid that exists only for them (the power group's graph stays drawable)
    rows=swing_rows,  # the grid step from TableRun; no SQL of the table reads it
    rollup=True,  # role and fleet rows: the same kernels over the rolled-up 100 ms series (or grid)
    rollup_deps=[["fleet", "fleet_power_100ms"], ["fleet", "fleet_power_grid"]],
)
swing_stats, fleet_swing_stats = table_assets(SWING_STATS)
