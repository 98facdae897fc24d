"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous trace and on the driver's 1 s average; and
`fleet_power_grid`, the host-and-above series the swings use when the grid step (setting
``grid_step_ms``) is not the 100 ms of `fleet_power_100ms`."""

from collections.abc import Iterator

import duckdb
import numpy as np
import polars as pl

from collectors.settings import DEFAULT_GRID_STEP_MS
from pipeline.grid import DAY_NS, carried_slots, grid_max_swing, grid_stats, summed_series
from pipeline.kernels import best_samples, in_file_order, registered, series_swings
from pipeline.phases.curve import host_curves
from pipeline.tables import Table, table_assets

WINDOWS_S = (1, 2, 10, 60)




_GPU_SLOTS = """
SELECT gpu, slot_100ms(ts) AS slot, CASE WHEN is_average THEN NULL ELSE power_w END::DOUBLE AS p, power_avg_w::DOUBLE AS pa,
       source = 'dcgm' AS dcgm
FROM power_100ms WHERE date = getvariable('partition_date') AND host = $host
"""


def _native(series: str, t_ns: np.ndarray, p: np.ndarray) -> dict[tuple[str, int], tuple[float, float | None]]:
    """A GPU series' max swing per window on its raw samples, exact over sample times (kernels.series_swings)."""
    return {(series, w): (mx, ms) for w, mx, ms in series_swings(t_ns, p.astype(np.float64), WINDOWS_S)}


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


def gpu_swings(con) -> None:
    """Rows of temp table ``_kernel_swings`` for every GPU: max swing per window on its raw samples
    (the instant series on energy_curve's best-source samples, the avg1s series on the rows of the
    best source that reports a 1 s average, as kernels.best_samples selects them), exact over
    sample times; p50/p99, ramp and window counts on its 100 ms slots, as the SQL computes them
    (tests/test_power_swings.py holds the two equal). Each GPU's curve from the run's cache, else
    each host's samples read once (curve.host_curves), one GPU at a time (memory: a GPU-day's
    curve, a host's slots)."""
    provisioned = {e: w for e, w in con.execute("SELECT entity, provisioned_w FROM inventory_entities WHERE level = 'gpu'").fetchall()}
    first_slot = con.execute("SELECT day_first_slot()").fetchall()[0][0]
    gpus: dict[str, list[int]] = {}
    for host, gpu in con.execute(
        "SELECT DISTINCT host, gpu FROM power_100ms WHERE date = getvariable('partition_date') ORDER BY 1, 2").fetchall():
        if f"{host}/{gpu}" in provisioned:  # GPUs missing from the inventory are left out (power_1s' check names them)
            gpus.setdefault(host, []).append(gpu)
    out: list[dict] = []
    for host, host_gpus in gpus.items():
        with in_file_order(con):  # power_100ms' part is sorted by (host, gpu, ts)
            slots = con.sql(_GPU_SLOTS, params={"host": host}).fetchnumpy()
        slot_gpu = np.asarray(slots["gpu"])
        curves = host_curves(con, host, host_gpus, with_avg=True)  # the run's cache, else the host's samples read once
        got = next(curves, None)
        for gpu in host_gpus:
            if got is not None and got[0] == gpu:
                cv, got = got[1], None
                native = _native("instant", cv.t_ns[~cv.is_average], cv.power_w[~cv.is_average]) | _native("avg1s", cv.avg_t_ns, cv.avg_w)
                del cv  # one GPU's curve in memory
                got = next(curves, None)
            else:
                t, p, _ = best_samples(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.uint8))
                native = _native("avg1s", t, p)
            mine = np.flatnonzero(slot_gpu == gpu)
            slot = np.asarray(slots["slot"])[mine]
            if len(slot) > 1 and not bool((slot[1:] > slot[:-1]).all()):
                order = np.argsort(slot, kind="stable")
                mine, slot = mine[order], slot[order]
            p_grid, pa_grid = (np.ma.filled(np.ma.asarray(slots[c])[mine].astype(np.float64), np.nan) for c in ("p", "pa"))
            out += _gpu_rows(host, gpu, float(provisioned[f"{host}/{gpu}"]), slot, p_grid, pa_grid,
                             np.ma.filled(np.ma.asarray(slots["dcgm"])[mine], False).astype(bool), native, first_slot)
    if out:
        insert_frame(con, "_kernel_swings", pl.DataFrame(out, infer_schema_length=None))


def insert_frame(con, table: str, frame: pl.DataFrame) -> None:
    """Append a polars frame to a temp table by column name."""
    with registered(con, "_grid_frame", frame):
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _grid_frame")


def grid_series(con, grid_step_ms: int) -> None:
    """Temp table ``_grid_series``: the cluster-day's summed series on the ``grid_step_ms`` grid
    (pipeline/grid.py), inserted one host at a time; none at the default step, where
    fleet_power_100ms is the grid."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _grid_series (
        level VARCHAR, entity VARCHAR, bin BIGINT, power_w DOUBLE, gpus_reporting INTEGER, complete BOOLEAN,
        carried_ms INTEGER, ahead_ms INTEGER)""")
    step = grid_step_ms
    if step == DEFAULT_GRID_STEP_MS:
        return
    for frame in summed_series(con, step):
        insert_frame(con, "_grid_series", frame)


_KERNEL_COLUMNS = """level VARCHAR, entity VARCHAR, series VARCHAR, window_s INTEGER, max_swing_w DOUBLE, p50_swing_w DOUBLE,
    p99_swing_w DOUBLE, max_ramp_w_per_s DOUBLE, windows_over_10pct BIGINT, windows_over_25pct BIGINT,
    windows_complete BIGINT, windows_incomplete BIGINT, grid_step_ms INTEGER, sample_interval_ms DOUBLE"""


def kernel_table(con) -> None:
    """Temp table ``_kernel_swings``, the rows the kernels below compute (sql/swing_stats/swing_stats.sql
    takes them as they are and computes only the levels no kernel has filled)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _kernel_swings ({_KERNEL_COLUMNS})")


_UPPER_SCOPE = "(getvariable('scope') IS DISTINCT FROM 'fleet' OR g.level IN ('role', 'fleet'))"
"""A fleet-day rollup (scope 'fleet') swings only the role and fleet series."""


def _entity_series(con, table: str, step: int, columns: str) -> Iterator[tuple[str, str, float, dict[str, np.ndarray]]]:
    """Each host-and-above entity of ``table`` (fleet_power_100ms or fleet_power_grid) with its
    provisioned power and its stored bins (``bin`` on the ``step`` grid, then ``columns``), one
    entity at a time (a filtered read each: cheaper than splitting one read by the string keys)."""
    entities = con.execute(
        f"""SELECT DISTINCT g.level, g.entity, e.provisioned_w FROM {table} AS g JOIN inventory_entities AS e USING (level, entity)
            WHERE g.date = getvariable('partition_date') AND {_UPPER_SCOPE} ORDER BY 1, 2"""
    ).fetchall()
    for level, entity, provisioned_w in entities:
        yield level, entity, float(provisioned_w), con.sql(
            f"""SELECT (epoch_us(ts) - epoch_us(day_start())) // ($step * 1000) AS bin, {columns}
                FROM {table} WHERE date = getvariable('partition_date') AND level = $level AND entity = $entity""",
            params={"step": step, "level": level, "entity": entity},
        ).fetchnumpy()


def _stored_step(con, step: int) -> None:
    """fleet_power_grid of this day must be on the setting's grid (it is built before swing_stats)."""
    try:
        stored = {s for (s,) in con.execute(
            "SELECT DISTINCT grid_step_ms FROM fleet_power_grid WHERE date = getvariable('partition_date')").fetchall()}
    except duckdb.CatalogException:
        raise RuntimeError(f"swing_stats at a {step} ms grid reads fleet_power_grid, which is not built: materialize it first") from None
    if stored - {step}:
        raise RuntimeError(f"fleet_power_grid of this day is on a {sorted(stored)} ms grid, the setting is {step} ms: "
                           "materialize fleet_power_grid again before swing_stats")


def _entity_rows(level: str, entity: str, provisioned_w: float, series: str, bin_: np.ndarray, value: np.ndarray, ok: np.ndarray,
                 step: int, carried_bins: np.ndarray | None = None, ahead_bins: np.ndarray | None = None) -> list[dict]:
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
    return [{"level": level, "entity": entity, "series": series, **row, "grid_step_ms": step}
            for row in grid_stats(values, complete, step, WINDOWS_S, provisioned_w, carried=carried, ahead=ahead)]


def _filled(x) -> tuple[np.ndarray, np.ndarray]:
    """A fetched column as float64 values and where they are not NULL."""
    m = np.ma.asarray(x)
    return np.ma.filled(m.astype(np.float64), 0.0), ~np.ma.getmaskarray(m)


def grid_swings(con, step: int) -> None:
    """Rows of temp table ``_kernel_swings`` for the host, cluster, role and fleet (a fleet-day: role and
    fleet), each entity's dense day series swung by pipeline/grid.py's grid_stats (polars rolling
    max/min: exact sliding windows over complete bins, as the SQL's block pairs are). The avg1s
    series on fleet_power_100ms; the instant series on fleet_power_100ms at the default step, on
    fleet_power_grid at another. Row for row what sql/swing_stats/swing_stats.sql computes for these
    levels on its own (tests/test_power_swings.py), at a fraction of its cost. ``step``: the
    grid_step_ms setting."""
    out: list[dict] = []
    columns = "power_w, power_avg_w, complete, complete_avg1s, carried_ms, power_best_w, complete_best"
    for level, entity, provisioned_w, x in _entity_series(con, "fleet_power_100ms", DEFAULT_GRID_STEP_MS, columns):
        complete = np.ma.filled(np.ma.asarray(x["complete"]), False).astype(bool)
        complete_avg = np.ma.filled(np.ma.asarray(x["complete_avg1s"]), False).astype(bool)
        carried = np.ma.filled(np.ma.asarray(x["carried_ms"]), 0).astype(np.int64) // DEFAULT_GRID_STEP_MS
        if not complete.any() and not complete_avg.any():  # GPUs mixing instantaneous and 1 s-average sources
            best, has_best = _filled(x["power_best_w"])
            complete_best = np.ma.filled(np.ma.asarray(x["complete_best"]), False).astype(bool)
            out += _entity_rows(level, entity, provisioned_w, "mixed", x["bin"], best, complete_best & has_best, DEFAULT_GRID_STEP_MS, carried)
        else:
            avg, has_avg = _filled(x["power_avg_w"])
            step_s = _refresh_step_s(np.asarray(x["bin"]), carried, complete_avg & has_avg)
            out += [row for row in _entity_rows(level, entity, provisioned_w, "avg1s", x["bin"], avg, complete_avg & has_avg,
                                                DEFAULT_GRID_STEP_MS, carried)
                    if step_s is None or row["window_s"] >= 2 * step_s]
        if step == DEFAULT_GRID_STEP_MS:
            inst, has_inst = _filled(x["power_w"])
            out += _entity_rows(level, entity, provisioned_w, "instant", x["bin"], inst, complete & has_inst, step, carried)
    if step != DEFAULT_GRID_STEP_MS:
        _stored_step(con, step)
        for level, entity, provisioned_w, x in _entity_series(con, "fleet_power_grid", step, "power_w, complete, carried_ms, ahead_ms"):
            complete = np.ma.filled(np.ma.asarray(x["complete"]), False).astype(bool)
            inst, has_inst = _filled(x["power_w"])
            behind = np.ma.filled(np.ma.asarray(x["carried_ms"]), 0).astype(np.int64) // step
            ahead = np.ma.filled(np.ma.asarray(x["ahead_ms"]), 0).astype(np.int64) // step
            out += _entity_rows(level, entity, provisioned_w, "instant", x["bin"], inst, complete & has_inst, step, behind, ahead)
    if out:
        insert_frame(con, "_kernel_swings", pl.DataFrame(out))
    con.execute("SET VARIABLE upper_swings_from_kernel = true")


def upper_swings(con, grid_step_ms: int) -> None:
    """The fleet-day's kernel (role and fleet rows)."""
    kernel_table(con)
    grid_swings(con, grid_step_ms)


def swing_inputs(con, grid_step_ms: int) -> None:
    """The cluster-day's kernels: every row of the table (GPUs, then the levels above)."""
    kernel_table(con)
    gpu_swings(con)
    con.execute("SET VARIABLE gpu_swings_from_kernel = true")
    grid_swings(con, grid_step_ms)


FLEET_POWER_GRID = Table(
    "fleet_power_grid",
    "Per bin of the grid_step_ms grid (only where that step is not 100 ms: at 100 ms "
    "fleet_power_100ms is the grid), summed exact mean power (W) of every host, cluster, role and "
    "fleet from energy_curve, GPUs covering the bin, and whether the bin is complete.",
    "cluster-day",
    deps=["energy_curve", "fleet_power_100ms"],
    group="swings",
    before=grid_series,
    grid_step=True,
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
    before=swing_inputs,
    grid_step=True,
    rollup=True,  # role and fleet rows: the same SQL over the rolled-up 100 ms series (or grid)
    rollup_deps=[["fleet", "fleet_power_100ms"], ["fleet", "fleet_power_grid"]],
    rollup_before=upper_swings,
)
swing_stats, fleet_swing_stats = table_assets(SWING_STATS)
