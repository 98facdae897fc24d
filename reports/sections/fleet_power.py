"""2. Fleet power over the day by role: stacked means per bucket, the fleet's 2 s max envelope,
provisioned lines."""

from __future__ import annotations

import math

from reports import charts
from reports.sections.base import Chart, Code, Ctx, Section, Table, num

TITLE = "Fleet power over the day"
COLS = ("level", "entity", "ts", "power_w", "provisioned_w")


def bucket_seconds(span_s: float, series: int, budget: int = charts.MAX_POINTS - 400) -> int:
    """1 minute, or the next whole minute that keeps ``series`` lines under the point budget."""
    minutes = math.ceil(max(span_s, 60) * series / 60 / budget)
    return 60 * max(1, minutes)


def build(ctx: Ctx) -> Section:
    s = Section("fleet_power", TITLE)
    r = ctx.reader
    if not r.has("fleet_power_1s", COLS):
        s.not_available(r.missing("fleet_power_1s", COLS))
        return s
    d = ctx.sql_date()
    span = r.one(
        f"SELECT epoch((max(ts))::TIMESTAMPTZ) - epoch((min(ts))::TIMESTAMPTZ), count(DISTINCT entity) FROM fleet_power_1s WHERE date = {d} AND level = 'role'"
    )
    if span[0] is None:
        s.not_available(f"`fleet_power_1s` has no rows for {ctx.date}")
        return s
    bucket = bucket_seconds(span[0], (span[1] or 1) + 1)
    area = r.rows(
        f"""WITH s AS (SELECT ts, entity AS role, sum(power_w) AS w FROM fleet_power_1s
                       WHERE date = {d} AND level = 'role' GROUP BY ALL)
            SELECT epoch_ms((time_bucket(INTERVAL {bucket} SECOND, ts))::TIMESTAMPTZ) AS t, role, avg(w) AS w
            FROM s GROUP BY ALL ORDER BY t, role"""
    )
    envelope = r.rows(
        f"""WITH s AS (SELECT ts, sum(power_w) AS w FROM fleet_power_1s WHERE date = {d} AND level = 'fleet' GROUP BY ALL),
                 two AS (SELECT time_bucket(INTERVAL 2 SECOND, ts) AS t2, avg(w) AS w FROM s GROUP BY ALL)
            SELECT epoch_ms((time_bucket(INTERVAL {bucket} SECOND, t2))::TIMESTAMPTZ) AS t, max(w) AS w FROM two GROUP BY ALL ORDER BY t"""
    )
    provisioned = r.rows(
        f"""SELECT level, entity, max(provisioned_w) AS w FROM fleet_power_1s
            WHERE date = {d} AND level IN ('role', 'fleet') GROUP BY ALL ORDER BY level, entity"""
    )
    fleet_prov = sum(p["w"] or 0 for p in provisioned if p["level"] == "fleet")
    lines: dict[float, list[str]] = {}  # one dashed line per distinct value, its labels joined
    if fleet_prov:
        lines.setdefault(fleet_prov, []).append("fleet")
    for p in provisioned:
        if p["level"] == "role" and p["w"]:
            lines.setdefault(p["w"], []).append(p["entity"])
    # Watts up to 20 kW, else kW (a 1,000-GPU fleet draws hundreds of kW).
    unit, scale = ("kW", 1000.0) if max([fleet_prov, *(r["w"] or 0 for r in envelope)]) > 20_000 else ("W", 1.0)
    rules = [{"label": f"{', '.join(names)} provisioned {w / 1000:,.1f} kW", "w": num(w / scale, 3)} for w, names in sorted(lines.items(), reverse=True)]
    for row in area:
        row["w"] = num(row["w"] / scale, 3)
    for row in envelope:
        row["w"] = num(row["w"] / scale, 3)
    s.add(
        Chart(
            "fleet_power",
            charts.fleet_power(area, envelope, rules, bucket, unit),
            "Areas: mean power of each role per bucket, stacked. Line: the fleet's highest 2 s mean power inside each bucket. "
            "Dashed: provisioned power of the fleet and of each role.",
        )
    )
    stats = r.rows(
        f"""WITH s AS (SELECT ts, level, entity, sum(power_w) AS w, sum(provisioned_w) AS p FROM fleet_power_1s
                       WHERE date = {d} AND level IN ('role', 'fleet') GROUP BY ALL),
                 two AS (SELECT level, entity, time_bucket(INTERVAL 2 SECOND, ts) AS t2, avg(w) AS w FROM s GROUP BY ALL)
            SELECT s.level, s.entity, avg(s.w) AS mean_w, max(s.w) AS max_1s_w,
                   (SELECT max(w) FROM two WHERE two.level = s.level AND two.entity = s.entity) AS max_2s_w,
                   max(s.p) AS provisioned_w
            FROM s GROUP BY ALL ORDER BY s.level DESC, s.entity"""
    )
    s.add(
        Table(
            ["level", "entity", "mean (W)", "peak 1 s (W)", "peak 2 s (W)", "provisioned (W)", "peak 1 s (% prov.)"],
            [
                [
                    x["level"],
                    x["entity"],
                    num(x["mean_w"], 0),
                    num(x["max_1s_w"], 0),
                    num(x["max_2s_w"], 0),
                    num(x["provisioned_w"], 0),
                    num(100 * x["max_1s_w"] / x["provisioned_w"]) if x["provisioned_w"] else None,
                ]
                for x in stats
            ],
        ),
        Code(
            "the role series at 1 s",
            f"SELECT ts, entity AS role, power_w, power_pct FROM fleet_power_1s WHERE date = DATE '{ctx.date}' AND level = 'role' ORDER BY ts",
        ),
    )
    return s
