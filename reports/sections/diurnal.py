"""6. Diurnal profile: power and request rate by hour of day, one line per trailing day."""

from __future__ import annotations

import datetime as dt

from reports import charts
from reports.sections.base import Chart, Ctx, Note, Section, Table, num

TITLE = "Diurnal profile"
TRAILING_DAYS = 7
PROFILE_COLS = ("role", "entity", "dow", "hour", "mean_w", "p5_w", "p95_w", "requests_per_s", "output_tokens_per_s", "j_per_output_token", "days")


def build(ctx: Ctx) -> Section:
    s = Section("diurnal", TITLE)
    r = ctx.reader
    first = (dt.date.fromisoformat(ctx.date) - dt.timedelta(days=TRAILING_DAYS - 1)).isoformat()
    days = f"date BETWEEN DATE '{first}' AND {ctx.sql_date()}"
    power = []
    if r.has("fleet_power_1s", ("level", "entity", "ts", "power_w")):
        power = r.rows(
            f"""WITH s AS (SELECT date, ts, entity AS role, sum(power_w) AS w FROM fleet_power_1s
                           WHERE {days} AND level = 'role' GROUP BY ALL)
                SELECT strftime(date, '%Y-%m-%d') AS day, role, hour(ts) AS hour, round(avg(w), 1) AS w
                FROM s GROUP BY ALL ORDER BY day, role, hour"""
        )
    requests = []
    if r.has("requests", ("arrival_ts", "date")):
        requests = r.rows(
            f"""SELECT strftime(date, '%Y-%m-%d') AS day, hour(arrival_ts) AS hour, round(count(*) / 3600.0, 4) AS rps
                FROM requests WHERE {days} AND arrival_ts >= date::TIMESTAMPTZ AND arrival_ts < date::TIMESTAMPTZ + INTERVAL 1 DAY
                GROUP BY ALL ORDER BY day, hour"""
        )
    profile, profile_rows = [], []
    if r.has("diurnal_profile", PROFILE_COLS):
        profile_rows = r.rows(f"SELECT * FROM {r.day_relation('diurnal_profile', ctx.date)} WHERE dow IS NULL ORDER BY role, entity, hour")
        profile = [
            {"role": x["role"], "hour": x["hour"], "mean": num(x["mean_w"]), "p5": num(x["p5_w"]), "p95": num(x["p95_w"])}
            for x in profile_rows
            if x["entity"] == x["role"] and x["p5_w"] is not None
        ]
    day_rps = {q["hour"]: q["rps"] for q in requests if q["day"] == ctx.date}
    if len(day_rps) == 24 and min(day_rps.values()) > 0:
        hi = max(day_rps, key=day_rps.get)
        lo = min(day_rps, key=day_rps.get)
        s.add(Note(f"Requests on {ctx.date}: peak hour {hi}:00 UTC at {day_rps[hi]:.2f}/s, trough hour {lo}:00 UTC at "
                   f"{day_rps[lo]:.2f}/s: peak/trough {day_rps[hi] / day_rps[lo]:.2f}.", "info"))
    if power or requests:
        n_days = len({p["day"] for p in power} | {q["day"] for q in requests})
        s.add(Chart("diurnal", charts.diurnal(power, requests, profile),
                    f"Hourly means for the {n_days} day(s) available up to {ctx.date} (at most {TRAILING_DAYS}); a partial day shows only its hours."))
    else:
        s.not_available("no role-level power (`fleet_power_1s`) or requests for the trailing days")
    tz = {}
    if r.has("inventory_endpoints", ("endpoint", "tz_offset_h")):
        tz = {x["endpoint"]: x["tz_offset_h"] for x in r.rows("SELECT DISTINCT endpoint, tz_offset_h FROM inventory_endpoints")}

    def clock(role: str, entity: str, hour: int) -> str:
        """The hour in the endpoint's local time (tz_offset_h, fractional offsets kept), else UTC."""
        off = tz.get(entity) if role == "inference" and entity != role else None
        if off is None:
            return f"{hour:02d}:00 UTC"
        minutes = round((hour + off) * 60) % (24 * 60)
        sign = "+" if off >= 0 else "−"
        return f"{minutes // 60:02d}:{minutes % 60:02d} local (UTC{sign}{abs(off):g} h)"

    if profile_rows:
        table = []
        for entity in sorted({(x["role"], x["entity"]) for x in profile_rows}):
            rows = [x for x in profile_rows if (x["role"], x["entity"]) == entity and x["mean_w"] is not None]
            if not rows:
                continue
            peak = max(rows, key=lambda x: x["mean_w"])
            trough = min(rows, key=lambda x: x["mean_w"])
            ratio = num(peak["mean_w"] / trough["mean_w"], 2) if trough["mean_w"] else None
            table.append([entity[0], entity[1], clock(*entity, peak["hour"]), num(peak["mean_w"], 0), clock(*entity, trough["hour"]),
                          num(trough["mean_w"], 0), ratio,
                          num(max((x["requests_per_s"] or 0) for x in rows), 2), num(peak["j_per_output_token"], 3), peak["days"]])
        s.add(Table(["role", "entity", "peak hour", "peak-hour mean (W)", "trough hour", "trough-hour mean (W)", "power peak/trough",
                     "max requests/s", "J / output token at peak", "days"],
                    table[:40], "From `diurnal_profile` (all days of the week). Hours start at the time shown: an endpoint's in its own local time "
                    "(its `tz_offset_h` in the inventory), the roles' and the fleet's in UTC."))
    elif not r.has("diurnal_profile", PROFILE_COLS):
        s.not_available(r.missing("diurnal_profile", PROFILE_COLS) + ": the p5–p95 band and the per-endpoint profile table")
    else:
        s.add(Note("`diurnal_profile` has no rows for this day.", "info"))
    return s
