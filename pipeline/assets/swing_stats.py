"""`swing_stats`: how hard each GPU, host, cluster, role and the fleet swing the power feed
within 1, 2, 10 and 60 s, on the instantaneous trace and on the driver's 1 s average; and
`fleet_power_grid`, the host-and-above series the swings use when the grid step (setting
``grid_step_ms``) is not the 100 ms of `fleet_power_100ms`."""

import duckdb
import numpy as np
import polars as pl

from collectors.settings import DEFAULT_GRID_STEP_MS
from pipeline.grid import DAY_NS, dense, grid_stats, summed_series
from pipeline.kernels import arrow_frame, best_samples, in_file_order, max_swings, registered
from pipeline.tables import Table, table_assets

WINDOWS_S = (1, 2, 10, 60)

_AVG1S_SAMPLES = """
SELECT gpu, t_ns, power_avg_w, source_rank::UTINYINT AS source_rank
FROM power_day_samples WHERE host = $host AND power_avg_w IS NOT NULL
"""

_INSTANT_SAMPLES = """
SELECT t_ns, power_w::DOUBLE AS p FROM energy_curve
WHERE date = getvariable('partition_date') AND host = $host AND gpu = $gpu AND NOT is_average
"""


def _swings(samples: pl.DataFrame, host: str, series: str) -> pl.DataFrame:
    return max_swings(samples, WINDOWS_S).with_columns(pl.lit(host).alias("host"), pl.lit(series).alias("series"))


def native_swings(con) -> None:
    """Temp table ``_native_swings``: each GPU's max swing per window on its raw samples (the
    instant series on energy_curve's best-source samples, the avg1s series on the rows of the best
    source that reports a 1 s average, as kernels.best_samples selects them), exact over sample
    times; one GPU at a time (memory: a GPU-day's samples, and a host's 1 s averages)."""
    gpus: dict[str, list[int]] = {}
    for host, gpu in con.execute(
        "SELECT DISTINCT host, gpu FROM energy_curve WHERE date = getvariable('partition_date') ORDER BY 1, 2").fetchall():
        gpus.setdefault(host, []).append(gpu)
    frames = []
    for host, host_gpus in gpus.items():
        avg = con.sql(_AVG1S_SAMPLES, params={"host": host}).to_arrow_table()
        avg_gpu = avg["gpu"].to_numpy()
        avg_t, avg_p, avg_rank = avg["t_ns"].to_numpy(), avg["power_avg_w"].to_numpy(), avg["source_rank"].to_numpy()
        del avg
        for gpu in host_gpus:
            # the curve's part is written sorted by (host, gpu, t_ns) in row groups that the gpu
            # filter skips, and read in file order; sorted here only if it ever is not
            with in_file_order(con):
                inst = arrow_frame(con.sql(_INSTANT_SAMPLES, params={"host": host, "gpu": gpu}).to_arrow_table())
            if not inst["t_ns"].is_sorted():
                inst = inst.sort("t_ns")
            frames.append(_swings(inst.with_columns(pl.lit(gpu, pl.Int64).alias("gpu")), host, "instant"))
            rows = np.flatnonzero(avg_gpu == gpu)
            t, p, _ = best_samples(avg_t[rows], avg_p[rows], avg_rank[rows])
            frames.append(_swings(pl.DataFrame({"gpu": np.full(len(t), gpu, np.int64), "t_ns": t, "p": p}), host, "avg1s"))
    native = pl.concat(frames) if frames else max_swings(pl.DataFrame(), WINDOWS_S).with_columns(
        pl.lit(None, pl.Utf8).alias("host"), pl.lit(None, pl.Utf8).alias("series"))
    native = native.select("host", "gpu", "series", "window_s", "max_swing_w", "sample_interval_ms")
    with registered(con, "_native_swings_frame", native):
        con.execute("CREATE OR REPLACE TEMP TABLE _native_swings AS SELECT * FROM _native_swings_frame")


def insert_frame(con, table: str, frame: pl.DataFrame) -> None:
    """Append a polars frame to a temp table by column name."""
    with registered(con, "_grid_frame", frame):
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _grid_frame")


def grid_step(con) -> int:
    """The connection's grid step (ms): the resource's setting; 100 where none is set (SQL by hand)."""
    return con.execute("SELECT getvariable('grid_step_ms')").fetchall()[0][0] or DEFAULT_GRID_STEP_MS  # fetchall: the result is finished


def grid_series(con) -> None:
    """Temp table ``_grid_series``: the cluster-day's summed series on the grid (pipeline/grid.py),
    inserted one host at a time; none at the default step, where fleet_power_100ms is the grid."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _grid_series (
        level VARCHAR, entity VARCHAR, bin BIGINT, power_w DOUBLE, gpus_reporting INTEGER, complete BOOLEAN)""")
    step = grid_step(con)
    if step == DEFAULT_GRID_STEP_MS:
        return
    for frame in summed_series(con, step):
        insert_frame(con, "_grid_series", frame)


_GRID_COLUMNS = """level VARCHAR, entity VARCHAR, series VARCHAR, window_s INTEGER, max_swing_w DOUBLE, p50_swing_w DOUBLE,
    p99_swing_w DOUBLE, max_ramp_w_per_s DOUBLE, windows_over_10pct BIGINT, windows_over_25pct BIGINT,
    windows_complete BIGINT, windows_incomplete BIGINT, grid_step_ms INTEGER"""

_UPPER_SCOPE = "(getvariable('scope') IS DISTINCT FROM 'fleet' OR g.level IN ('role', 'fleet'))"
"""A fleet-day rollup (scope 'fleet') swings only the role and fleet series."""

_GRID_100MS = f"""
SELECT g.level, g.entity, e.provisioned_w, (epoch_ms(g.ts) - epoch_ms(day_start())) // 100 AS bin,
       g.power_w, g.power_avg_w, g.complete
FROM fleet_power_100ms AS g JOIN inventory_entities AS e USING (level, entity)
WHERE g.date = getvariable('partition_date') AND {_UPPER_SCOPE}
"""


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


def _entity_rows(frame: pl.DataFrame, series: str, value: str, ok: pl.Expr, step: int) -> list[dict]:
    """swing_stats' grid columns of each (level, entity) of ``frame`` (bin, the ``value`` column, a
    provisioned_w), on the dense day series whose bins are complete where ``ok`` holds."""
    bins = DAY_NS // (step * 1_000_000)
    out = []
    for (level, entity), part in frame.with_columns(ok.fill_null(False).alias("_ok")).partition_by(
            ["level", "entity"], as_dict=True, maintain_order=True).items():
        values, complete = dense(part.select("bin", pl.col(value).fill_null(0.0).alias("power_w"), pl.col("_ok").alias("complete")), bins)
        out += [{"level": level, "entity": entity, "series": series, **row, "grid_step_ms": step}
                for row in grid_stats(values, complete, step, WINDOWS_S, float(part["provisioned_w"][0]))]
    return out


def grid_swings(con) -> None:
    """Temp table ``_grid_swings``: the host, cluster, role and fleet rows (a fleet-day: role and
    fleet), each entity's dense day series swung by pipeline/grid.py's grid_stats (polars rolling
    max/min: exact sliding windows over complete bins, as the SQL's block pairs are). The avg1s
    series on fleet_power_100ms; the instant series on fleet_power_100ms at the default step, on
    fleet_power_grid at another. Row for row what sql/swing_stats/swing_stats.sql computes for these
    levels on its own (tests/test_swing_stats.py), at a fraction of its cost."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _grid_swings ({_GRID_COLUMNS})")
    step = grid_step(con)
    slots = arrow_frame(con.sql(_GRID_100MS).to_arrow_table())
    out = _entity_rows(slots, "avg1s", "power_avg_w", pl.col("complete") & pl.col("power_avg_w").is_not_null(), DEFAULT_GRID_STEP_MS)
    if step == DEFAULT_GRID_STEP_MS:
        out += _entity_rows(slots, "instant", "power_w", pl.col("complete") & pl.col("power_w").is_not_null(), step)
    else:
        del slots
        _stored_step(con, step)
        grid = arrow_frame(con.sql(
            f"""SELECT g.level, g.entity, e.provisioned_w, (epoch_us(g.ts) - epoch_us(day_start())) // ($step * 1000) AS bin, g.power_w, g.complete
                FROM fleet_power_grid AS g JOIN inventory_entities AS e USING (level, entity)
                WHERE g.date = getvariable('partition_date') AND {_UPPER_SCOPE}""",
            params={"step": step},
        ).to_arrow_table())
        out += _entity_rows(grid, "instant", "power_w", pl.col("complete") & pl.col("power_w").is_not_null(), step)
    if out:
        insert_frame(con, "_grid_swings", pl.DataFrame(out))
    con.execute("SET VARIABLE upper_swings_from_kernel = true")


def swing_inputs(con) -> None:
    """The cluster-day's kernels: each GPU's swings on its samples, the grid rows above the GPU."""
    native_swings(con)
    grid_swings(con)


FLEET_POWER_GRID = Table(
    "fleet_power_grid",
    "Per bin of the grid_step_ms grid (only where that step is not 100 ms: at 100 ms "
    "fleet_power_100ms is the grid), summed exact mean power (W) of every host, cluster, role and "
    "fleet from energy_curve, GPUs covering the bin, and whether the bin is complete.",
    "cluster-day",
    deps=["energy_curve", "fleet_power_100ms"],
    group="swings",
    before=grid_series,
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
    rollup=True,  # role and fleet rows: the same SQL over the rolled-up 100 ms series (or grid)
    rollup_deps=[["fleet", "fleet_power_100ms"], ["fleet", "fleet_power_grid"]],
    rollup_before=grid_swings,
)
swing_stats, fleet_swing_stats = table_assets(SWING_STATS)
