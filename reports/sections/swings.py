"""3. Swings: distribution per role and window, the day's largest swing events with the SQL to
drill into each."""

from __future__ import annotations

import datetime as dt

from reports import charts
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num

TITLE = "Power swings"
WINDOWS_S = (2, 10, 60)
QUANTILES = [round(i / 100, 2) for i in range(101)]
SWING_COLS = ("level", "entity", "window_s", "series", "max_swing_w", "max_swing_pct", "p50_swing_w", "p99_swing_w",
              "max_ramp_w_per_s", "windows_over_10pct", "windows_over_25pct", "provisioned_w")
EVENT_WINDOW_S = 2


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


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


def top_events(ctx: Ctx, levels: tuple[str, ...], limit: int = 10) -> list[dict]:
    """The largest change within 2 s of each entity's 1 s series (the current second against the
    two before it, when they lie within 2 s), one event per entity and minute, largest first.
    Lags and one GROUP BY, no framed window: ~10 M host-seconds (1,000 GPUs) in seconds."""
    level_list = ", ".join(f"'{lv}'" for lv in levels)
    # A role spans fleets (one row per fleet and second): sum them; hosts and clusters are unique.
    source = (
        f"""SELECT level, entity, ts::TIMESTAMPTZ AS ts, sum(power_w) AS w, sum(provisioned_w) AS p FROM fleet_power_1s
            WHERE date = {ctx.sql_date()} AND level IN ({level_list}) GROUP BY ALL"""
        if "role" in levels
        else f"""SELECT level, entity, ts::TIMESTAMPTZ AS ts, power_w AS w, provisioned_w AS p FROM fleet_power_1s
                 WHERE date = {ctx.sql_date()} AND level IN ({level_list})"""
    )
    return ctx.reader.rows(
        f"""WITH s AS ({source}),
                 l AS (SELECT level, entity, ts, w, p,
                              CASE WHEN ts - lag(ts, 1) OVER win <= INTERVAL {EVENT_WINDOW_S} SECOND THEN lag(w, 1) OVER win END AS w1,
                              CASE WHEN ts - lag(ts, 2) OVER win <= INTERVAL {EVENT_WINDOW_S} SECOND THEN lag(w, 2) OVER win END AS w2
                       FROM s WINDOW win AS (PARTITION BY level, entity ORDER BY ts)),
                 ev AS (SELECT level, entity, ts, p, w AS to_w, coalesce(w2, w1, w) AS from_w,
                               greatest(w, coalesce(w1, w), coalesce(w2, w)) - least(w, coalesce(w1, w), coalesce(w2, w)) AS swing_w,
                               time_bucket(INTERVAL 1 MINUTE, ts) AS minute
                        FROM l),
                 best AS (SELECT level, entity, minute, arg_max(ev, swing_w) AS e FROM ev GROUP BY ALL)
            SELECT level, entity, epoch_ms((e.ts)::TIMESTAMPTZ) AS t_ms, e.swing_w AS swing_w,
                   100 * e.swing_w / nullif(e.p, 0) AS swing_pct, e.from_w AS from_w, e.to_w AS to_w, e.p AS p
            FROM best WHERE e.swing_w > 0 ORDER BY swing_pct DESC NULLS LAST, swing_w DESC, t_ms LIMIT {limit}"""
    )


def drill_sql(ctx: Ctx, ev: dict) -> str:
    t = dt.datetime.fromtimestamp(ev["t_ms"] / 1000, dt.UTC)
    lo = (t - dt.timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S")
    hi = (t + dt.timedelta(seconds=5)).strftime("%Y-%m-%d %H:%M:%S")
    if ev["level"] == "host":
        return (
            f"SELECT ts, gpu, source, power_w FROM power WHERE date = DATE '{ctx.date}' AND host = '{ev['entity']}' "
            f"AND ts BETWEEN TIMESTAMPTZ '{lo}+00' AND TIMESTAMPTZ '{hi}+00' ORDER BY ts, gpu"
        )
    return (
        f"SELECT ts, power_w, power_pct, gpus_reporting FROM fleet_power_1s WHERE date = DATE '{ctx.date}' "
        f"AND level = '{ev['level']}' AND entity = '{ev['entity']}' AND ts BETWEEN TIMESTAMPTZ '{lo}+00' AND TIMESTAMPTZ '{hi}+00' ORDER BY ts"
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
    if have_1s:
        s.add(
            *_events_table(
                ctx,
                top_events(ctx, ("cluster", "role")),
                "Top 10 swing events of clusters and roles (one per entity and minute, largest 2 s change of the 1 s series, % of provisioned)",
            )
        )
        s.add(*_events_table(ctx, top_events(ctx, ("host",)), "Top 10 swing events of hosts"))
    return s
