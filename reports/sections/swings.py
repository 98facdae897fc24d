"""3. Swings: distribution per role and window, the day's largest swing events with the SQL to
drill into each."""

from __future__ import annotations

import datetime as dt

import polars as pl

from pipeline.kernels import arrow_frame
from pipeline.sqltext import literal
from reports import charts
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num

TITLE = "Power swings"
WINDOWS_S = (2, 10, 60)
QUANTILES = [round(i / 100, 2) for i in range(101)]
SWING_COLS = ("level", "entity", "window_s", "series", "max_swing_w", "max_swing_pct", "p50_swing_w", "p99_swing_w",
              "max_ramp_w_per_s", "windows_over_10pct", "windows_over_25pct", "provisioned_w")
EVENT_WINDOW_S = 2


def _iso(ms: int) -> str:
    """A window's end, to the 100 ms (the grid's slots start there)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-5]


def ecdf_curves(ctx: Ctx) -> list[dict]:
    d = ctx.sql_date()
    unions = " UNION ALL ".join(
        f"""SELECT role, {w} AS window_s, time_bucket(INTERVAL {w} SECOND, ts) AS b,
                   100 * (max(w) - min(w)) / any_value(p) AS pct
            FROM s GROUP BY role, b HAVING count(*) >= {w} AND any_value(p) > 0"""
        for w in WINDOWS_S
    )
    return ctx.reader.rows(
        f"""WITH s AS (SELECT ts, entity AS role, sum(power_w) AS w, sum(provisioned_w) AS p FROM fleet_power_1s
                       WHERE date = {d} AND level = 'role' GROUP BY ALL),
                 win AS ({unions}),
                 qs AS (SELECT role, window_s, quantile_cont(pct, {QUANTILES}) AS pcts FROM win GROUP BY ALL)
            SELECT role, window_s::VARCHAR || ' s' AS window, unnest({QUANTILES}) AS q, round(unnest(pcts), 3) AS pct
            FROM qs ORDER BY role, window_s, q"""
    )


GRID_COLS = ("level", "entity", "ts", "power_w", "complete")


def event_grid(ctx: Ctx) -> tuple[str, int] | None:
    """The summed grid the swing events slide on, as swing_stats' rows above the GPU do:
    fleet_power_grid where it holds the day (a grid_step_ms setting other than 100 ms), else
    fleet_power_100ms; None when neither is there."""
    r = ctx.reader
    if r.has("fleet_power_grid", (*GRID_COLS, "grid_step_ms")):
        step = r.one(f"SELECT any_value(grid_step_ms) FROM fleet_power_grid WHERE date = {ctx.sql_date()}")[0]
        if step:
            return "fleet_power_grid", int(step)
    if r.has("fleet_power_100ms", GRID_COLS):
        return "fleet_power_100ms", 100
    return None


def top_events(ctx: Ctx, levels: tuple[str, ...], limit: int = 10) -> list[dict]:
    """The largest max − min inside any 2 s window of each entity's summed grid series (complete
    slots only: exact over the grid, as swing_stats slides it), one event per entity and minute,
    largest first (% of provisioned, then W). Hosts: only the ``limit`` hosts with swing_stats'
    largest 2 s swing are slid (any other host's best event is smaller than each of theirs, so
    the top ``limit`` is unchanged); clusters and roles are few. The window is (t − 2 s, t]; the
    event's from → to are the window's extremes in time order."""
    grid = event_grid(ctx)
    if grid is None:
        return []
    table, step_ms = grid
    r, d = ctx.reader, ctx.sql_date()
    level_list = ", ".join(literal(lv) for lv in levels)
    only = ""
    if levels == ("host",) and r.has("swing_stats", ("level", "entity", "window_s", "series", "max_swing_w")):
        only = (f"AND entity IN (SELECT entity FROM swing_stats WHERE date = {d} AND level = 'host' AND window_s = {EVENT_WINDOW_S} "
                f"AND series = 'instant' ORDER BY max_swing_w DESC NULLS LAST, entity LIMIT {int(limit)})")
    where = f"date = {d} AND complete AND power_w IS NOT NULL"
    entities = arrow_frame(r.q(f"SELECT DISTINCT level, entity FROM {table} WHERE {where} AND level IN ({level_list}) {only} ORDER BY level, entity"))
    if entities.is_empty():
        return []
    entities = entities.with_row_index("g").with_columns(pl.col("g").cast(pl.Int64))
    # one read per entity, in time order: no sort of the millions of slots by name, no name on each
    series = pl.concat([arrow_frame(r.q(
        f"""SELECT {g}::BIGINT AS g, epoch_ms(ts::TIMESTAMPTZ) AS t_ms, power_w::DOUBLE AS w FROM {table}
            WHERE {where} AND level = {literal(level)} AND entity = {literal(entity)} ORDER BY ts"""
    )) for g, level, entity in entities.iter_rows()])
    provisioned = arrow_frame(r.q(
        f"""SELECT level, entity, max(p)::DOUBLE AS p FROM (SELECT level, entity, ts, sum(provisioned_w) AS p FROM fleet_power_1s
            WHERE date = {d} AND level IN ({level_list}) GROUP BY ALL) GROUP BY ALL"""
    )) if r.has("fleet_power_1s", ("level", "entity", "ts", "provisioned_w")) else pl.DataFrame(
        schema={"level": pl.Utf8, "entity": pl.Utf8, "p": pl.Float64})
    # one time axis for all entities, each shifted past the previous one by more than the window:
    # rolling windows never reach across entities (pipeline/kernels.py does the same); the rows are
    # in axis order, so a window or a minute of one entity is a slice found by binary search
    window_ms = EVENT_WINDOW_S * 1000
    t_min, t_max = int(series["t_ms"].min()), int(series["t_ms"].max())  # type: ignore[arg-type]
    stride = t_max - t_min + 2 * window_ms
    series = series.with_columns((pl.col("g") * stride + pl.col("t_ms") - t_min).alias("pos"))
    series = series.with_columns(
        (pl.col("w").rolling_max_by("pos", f"{window_ms}i") - pl.col("w").rolling_min_by("pos", f"{window_ms}i")).alias("swing_w"),
        (pl.col("t_ms") // 60_000).alias("minute"),
    )
    # each entity's largest swing in each minute; ranked by % of provisioned, then W
    best = (series.group_by("g", "minute").agg(pl.col("swing_w").max()).filter(pl.col("swing_w") > 0)
            .join(entities, on="g").join(provisioned, on=["level", "entity"], how="left")
            .with_columns((100 * pl.col("swing_w") / pl.col("p")).alias("swing_pct"))
            .sort(["swing_pct", "swing_w", "level", "entity", "minute"], descending=[True, True, False, False, False], nulls_last=True))
    if best.is_empty():
        return []
    # the first `limit` and any tied with the last of them: their instants decide among the ties
    last = best.row(min(limit, best.height) - 1, named=True)
    tied = pl.col("swing_pct").eq_missing(last["swing_pct"]) & (pl.col("swing_w") == last["swing_w"])
    best = best.with_row_index("rank").filter((pl.col("rank") < limit) | tied)
    pos, swing, w = series["pos"], series["swing_w"], series["w"]
    found = []
    for ev in best.iter_rows(named=True):
        # the event's instant: the first slot of its minute whose window holds the minute's largest swing
        start = ev["g"] * stride + ev["minute"] * 60_000 - t_min
        lo, hi = int(pos.search_sorted(start, side="left")), int(pos.search_sorted(start + 60_000, side="left"))
        at = lo + int((swing.slice(lo, hi - lo) == ev["swing_w"]).arg_max())  # type: ignore[arg-type]
        found.append({**ev, "at": at, "t_ms": int(series["t_ms"][at])})
    found.sort(key=lambda ev: (ev["swing_pct"] is None, -(ev["swing_pct"] or 0.0), -ev["swing_w"], ev["t_ms"], ev["level"], ev["entity"]))
    events = []
    for ev in found[:limit]:
        # the window (t − 2 s, t] of the event's slot: its extremes, in time order
        first_row = int(pos.search_sorted(int(pos[ev["at"]]) - window_ms, side="right"))
        inside = w.slice(first_row, ev["at"] + 1 - first_row)
        i_hi, i_lo = first_row + int(inside.arg_max()), first_row + int(inside.arg_min())  # type: ignore[arg-type]
        from_w, to_w = (w[i_lo], w[i_hi]) if i_lo <= i_hi else (w[i_hi], w[i_lo])
        events.append({"level": ev["level"], "entity": ev["entity"], "t_ms": ev["t_ms"], "swing_w": ev["swing_w"],
                       "swing_pct": ev["swing_pct"], "from_w": from_w, "to_w": to_w, "p": ev["p"],
                       "table": table, "grid_step_ms": step_ms})
    return events


def drill_sql(ctx: Ctx, ev: dict) -> str:
    t = dt.datetime.fromtimestamp(ev["t_ms"] / 1000, dt.UTC)
    lo = (t - dt.timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S.%f")
    hi = (t + dt.timedelta(seconds=5)).strftime("%Y-%m-%d %H:%M:%S.%f")
    if ev["level"] == "host":
        return (
            f"SELECT ts, gpu, source, power_w FROM power WHERE date = DATE '{ctx.date}' AND host = {literal(ev['entity'])} "
            f"AND ts BETWEEN TIMESTAMPTZ '{lo}+00' AND TIMESTAMPTZ '{hi}+00' ORDER BY ts, gpu"
        )
    return (
        f"SELECT ts, power_w, gpus_reporting, complete FROM {ev.get('table', 'fleet_power_100ms')} WHERE date = DATE '{ctx.date}' "
        f"AND level = {literal(ev['level'])} AND entity = {literal(ev['entity'])} AND ts BETWEEN TIMESTAMPTZ '{lo}+00' AND TIMESTAMPTZ '{hi}+00' ORDER BY ts"
    )


def _events_table(ctx: Ctx, events: list[dict], caption: str) -> list:
    if not events:
        return [Note(f"{caption}: no swing found.", "info")]
    table = Table(
        ["#", "time (UTC)", "level", "entity", "swing within 2 s (W)", "swing (% prov.)", "from → to (W)", "drill down"],
        [
            [i + 1, _iso(ev["t_ms"]), ev["level"], ev["entity"], num(ev["swing_w"], 0), num(ev["swing_pct"]),
             f"{ev['from_w']:,.0f} → {ev['to_w']:,.0f}", Code("SQL", drill_sql(ctx, ev))]
            for i, ev in enumerate(events)
        ],
        caption,
    )
    return [table]


def grid_words(steps: list) -> str:
    """The grid the instantaneous rows above the GPU were computed on, in words for a caption."""
    known = sorted({int(x) for x in steps if x is not None})
    return f"on a {' / '.join(map(str, known))} ms grid" if known else "on the grid"


def build(ctx: Ctx) -> Section:
    s = Section("swings", TITLE)
    r = ctx.reader
    have_1s = r.has("fleet_power_1s", ("level", "entity", "ts", "power_w", "provisioned_w"))
    have_stats = r.has("swing_stats", SWING_COLS)
    curves = ecdf_curves(ctx) if have_1s else []
    marks = []
    if have_stats:
        stat_rows = r.rows(
            f"""SELECT entity AS role, window_s, p50_swing_w, p99_swing_w, max_swing_w, provisioned_w
                FROM {r.day_relation('swing_stats', ctx.date)}
                WHERE level = 'role' AND series = 'instant' AND window_s IN {WINDOWS_S} AND provisioned_w > 0"""
        )
        for row in stat_rows:
            for stat, q, col in (("p50", 0.5, "p50_swing_w"), ("p99", 0.99, "p99_swing_w"), ("max", 1.0, "max_swing_w")):
                if row[col] is not None:
                    marks.append(
                        {"role": row["role"], "window": f"{int(row['window_s'])} s", "stat": stat, "q": q, "pct": num(100 * row[col] / row["provisioned_w"], 3)}
                    )
    if curves:
        s.add(
            Chart(
                "swing_distribution",
                charts.swing_ecdf(curves, marks),
                "Lines: for each role, the share of tumbling windows (2 s, 10 s, 60 s) of the 1 s role power whose swing (max − min) "
                "is at most x% of the role's provisioned power. "
                "Diamonds: p50, p99 and max swing of the instantaneous trace from `swing_stats` (at y = 0.5, 0.99, 1), "
                "which see the sub-second peaks the 1 s means hide.",
            )
        )
    elif not have_1s:
        s.not_available(r.missing("fleet_power_1s", ("level", "entity", "ts", "power_w", "provisioned_w")))
    else:
        s.add(Note(f"No role-level power for {ctx.date}.", "missing"))
    if have_stats:
        rows = r.rows(
            f"""SELECT * FROM {r.day_relation('swing_stats', ctx.date)}
                WHERE (level = 'role' AND (series = 'instant' OR window_s = 2)) OR (level IN ('cluster', 'fleet') AND window_s = 2)
                ORDER BY CASE level WHEN 'fleet' THEN 0 WHEN 'role' THEN 1 ELSE 2 END, entity, window_s, series"""
        )
        grid = grid_words([x.get("grid_step_ms") for x in rows if x["series"] == "instant"])
        s.add(
            Table(
                [
                    "level",
                    "entity",
                    "window (s)",
                    "series",
                    "grid (ms)",
                    "max swing (W)",
                    "max swing (% prov.)",
                    "p50 (W)",
                    "p99 (W)",
                    "max ramp (W/s)",
                    "windows > 10%",
                    "windows > 25%",
                ],
                [
                    [
                        x["level"],
                        x["entity"],
                        num(x["window_s"], 1),
                        x["series"],
                        x.get("grid_step_ms"),
                        num(x["max_swing_w"], 0),
                        num(x["max_swing_pct"]),
                        num(x["p50_swing_w"], 0),
                        num(x["p99_swing_w"], 0),
                        num(x["max_ramp_w_per_s"], 0),
                        x["windows_over_10pct"],
                        x["windows_over_25pct"],
                    ]
                    for x in rows[:60]
                ],
                "swing_stats: roles at every window of the instantaneous trace, and at 2 s also "
                f"on the driver's 1 s average (avg1s); clusters and the fleet at 2 s. Host and above {grid} "
                "(the instantaneous series; avg1s on the 100 ms grid; grid (ms) says each row's step).",
            )
        )
    else:
        s.not_available(r.missing("swing_stats", SWING_COLS) + ": swing statistics of the instantaneous trace")
    if r.has("swing_stats", (*SWING_COLS, "sample_interval_ms")):
        gpus = r.rows(
            f"""SELECT i.entity, i.max_swing_w, i.max_swing_pct, i.sample_interval_ms, a.max_swing_w AS avg1s_w
                FROM {r.day_relation('swing_stats', ctx.date)} AS i
                LEFT JOIN {r.day_relation('swing_stats', ctx.date)} AS a
                  ON a.level = 'gpu' AND a.entity = i.entity AND a.window_s = 2 AND a.series = 'avg1s'
                WHERE i.level = 'gpu' AND i.window_s = 2 AND i.series = 'instant' AND i.sample_interval_ms IS NOT NULL
                ORDER BY i.max_swing_pct DESC NULLS LAST, i.entity LIMIT 10"""
        )
        if gpus:
            s.add(
                Table(
                    ["GPU", "max 2 s swing (W)", "% of TDP", "sample spacing (ms)", "on the 1 s average (W)"],
                    [[x["entity"], num(x["max_swing_w"], 0), num(x["max_swing_pct"]), num(x["sample_interval_ms"], 0), num(x["avg1s_w"], 0)] for x in gpus],
                    "Top 10 GPUs by 2 s swing on their raw samples (swing_stats, level gpu: exact over sample times), beside the same "
                    "window on the driver's 1 s average where a source reports one: what a 1 s average hides.",
                )
            )
    grid = event_grid(ctx)
    if grid is not None:
        on = (f"largest max − min inside any 2 s window of the {grid[1]} ms grid ({grid[0]}, complete slots: "
              "exact over the grid, as swing_stats), time = the window's end")
        caption = f"Top 10 swing events of clusters and roles (one per entity and minute, {on}, % of provisioned)"
        s.add(*_events_table(ctx, top_events(ctx, ("cluster", "role")), caption))
        s.add(*_events_table(ctx, top_events(ctx, ("host",)), "Top 10 swing events of hosts (the same rule, among the 10 hosts with the largest 2 s swing)"))
    else:
        s.not_available("fleet_power_100ms is missing: swing events")
    s.add(*projection_blocks(ctx, s))
    return s


PROJECTION_COLS = ("kind", "entity", "members", "gpus", "method", "max_2s_swing_pct", "max_2s_swing_pct_low",
                   "max_2s_swing_pct_high", "p99_2s_swing_pct", "published_scale", "published_2s_swing_pct", "members_observed")


def projection_blocks(ctx: Ctx, s: Section) -> list:
    """The swing-at-scale chart and table (swing_projection); without the table, the section says so
    and counts as partial."""
    r = ctx.reader
    if not r.has("swing_projection", PROJECTION_COLS):
        s.not_available(r.missing("swing_projection", PROJECTION_COLS) + ": the swing-at-scale projection")
        return []
    rows = r.rows(f"SELECT * FROM {r.day_relation('swing_projection', ctx.date)} ORDER BY kind, entity, members")
    if not rows:
        return [Note("`swing_projection` has no rows for this day.", "info")]
    points = [{"series": f"{x['kind']} / {x['entity']}", "kind": x["kind"], "gpus": x["gpus"], "method": x["method"],
               "pct": num(x["max_2s_swing_pct"], 2), "low": num(x["max_2s_swing_pct_low"], 2), "high": num(x["max_2s_swing_pct_high"], 2)}
              for x in rows]
    published = [{"kind": x["kind"], "gpus": x["gpus"], "pct": x["published_2s_swing_pct"]} for x in rows if x["published_scale"]]
    table = [[x["kind"], x["entity"], x["members_observed"], x["gpus"], num(x["max_2s_swing_pct"]),
              f"{x['max_2s_swing_pct_low']:.1f}–{x['max_2s_swing_pct_high']:.1f}", num(x["p99_2s_swing_pct"]),
              x["published_2s_swing_pct"]] for x in rows if x["published_scale"] or x["members"] == x["members_observed"]]
    return [
        Chart("swing_projection", charts.swing_projection(points, published),
              "The 2 s swing (largest max − min in any 2 s window of the 100 ms grid, % of the summed members' provisioned power) "
              "of k summed inference endpoints (per cluster) and k hosts of a training job: observed subsets up to the members there "
              "are, then copies of them (inference: shifted by up to ±30 min, assuming independent bursts, which `endpoint_correlation` "
              "spike_lift ≈ 1 supports; training: in step). Line: median of the draws; band: their min–max (`swing_projection`)."),
        Table(["kind", "entity", "members observed", "GPUs", "max 2 s swing, 100 ms (% prov.)", "band (% prov.)",
               "p99 2 s swing, 100 ms (% prov.)", "published max 2 s swing (%)"], table,
              "At the fleet's own size and at the published figures' cluster size."),
    ]
