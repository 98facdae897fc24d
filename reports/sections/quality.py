"""7. Data quality: coverage per host, gaps, asset-check results, energy counter vs integrated
power, quarantined rows."""

from __future__ import annotations

import statistics

from reports import charts
from reports.data import fmt_ts, quarantine
from reports.sections.base import Chart, Code, Collapsed, Ctx, Note, Section, Table, num

TITLE = "Data quality"
MAX_HOST_BARS = 400


def coverage(ctx: Ctx) -> list[dict]:
    r = ctx.reader
    inv = "SELECT host, any_value(role) AS role, count(*) AS gpus FROM inventory_gpus GROUP BY host" if r.has("inventory_gpus") else \
        "SELECT NULL::VARCHAR AS host, NULL::VARCHAR AS role, 0 AS gpus WHERE false"
    return r.rows(
        f"""WITH g AS (SELECT host, gpu, count(*) AS secs, greatest(sum(gap_before::INT) - 1, 0) AS gaps
                       FROM power_1s WHERE date = {ctx.sql_date()} GROUP BY ALL),
                 h AS (SELECT host, count(*) AS gpus_reporting, sum(secs) AS secs, sum(gaps) AS gaps FROM g GROUP BY host),
                 inv AS ({inv})
            SELECT coalesce(inv.host, h.host) AS host, coalesce(inv.role, 'not in inventory') AS role,
                   coalesce(inv.gpus, h.gpus_reporting) AS gpus_expected, coalesce(h.gpus_reporting, 0) AS gpus_reporting,
                   round(100 * coalesce(h.secs, 0) / (86400.0 * greatest(coalesce(inv.gpus, h.gpus_reporting), 1)), 3) AS coverage_pct,
                   coalesce(h.gaps, 0) AS gaps
            FROM inv FULL OUTER JOIN h ON inv.host = h.host
            ORDER BY host"""
    )


def energy_counter(ctx: Ctx) -> list[dict]:
    r = ctx.reader
    if not (r.has("power", ("energy_j", "date", "host", "gpu")) and r.has("power_1s", ("energy_j",))):
        return []
    return r.rows(
        f"""WITH c AS (SELECT host, gpu, max(energy_j) - min(energy_j) AS counter_j FROM power
                       WHERE date = {ctx.sql_date()} AND energy_j IS NOT NULL GROUP BY ALL),
                 i AS (SELECT host, gpu, sum(energy_j) AS integrated_j FROM power_1s WHERE date = {ctx.sql_date()} GROUP BY ALL)
            SELECT host, gpu, counter_j, integrated_j, 100 * (integrated_j - counter_j) / counter_j AS diff_pct
            FROM c JOIN i USING (host, gpu) WHERE counter_j > 0 ORDER BY abs(diff_pct) DESC, host, gpu"""
    )


def build(ctx: Ctx) -> Section:
    s = Section("quality", TITLE)
    r = ctx.reader
    # Coverage and gaps.
    if r.has("power_1s", ("host", "gpu", "ts", "gap_before")):
        hosts = coverage(ctx)
        if hosts:
            worst = sorted(hosts, key=lambda h: (h["coverage_pct"], h["host"]))
            bars = hosts if len(hosts) <= MAX_HOST_BARS else sorted(worst[:MAX_HOST_BARS], key=lambda h: h["host"])
            s.add(Chart("coverage", charts.coverage_bars([{"host": h["host"], "role": h["role"], "coverage_pct": h["coverage_pct"]} for h in bars]),
                        "Share of the day's seconds with power, averaged over each host's GPUs (inventory GPUs that never reported count as 0)."
                        + (f" The {MAX_HOST_BARS} least covered hosts of {len(hosts)} are shown." if len(hosts) > MAX_HOST_BARS else "")))
            s.headline["hosts"] = len(hosts)
            s.headline["hosts_below_95pct"] = sum(1 for h in hosts if h["coverage_pct"] < 95)
            s.headline["mean_coverage_pct"] = num(statistics.fmean(h["coverage_pct"] for h in hosts), 2)
            s.add(
                Table(
                    ["host", "role", "GPUs reporting / expected", "coverage (%)", "gaps > 2 s"],
                    [[h["host"], h["role"], f"{h['gpus_reporting']} / {h['gpus_expected']}", num(h["coverage_pct"], 2), h["gaps"]] for h in worst[:10]],
                    f"The 10 least covered of {len(hosts)} hosts; {s.headline['hosts_below_95pct']} below 95%.",
                ),
                Code(
                    "coverage of every GPU",
                    f"SELECT host, gpu, count(*) / 864.0 AS coverage_pct, sum(gap_before::INT) AS gaps FROM power_1s "
                    f"WHERE date = DATE '{ctx.date}' GROUP BY ALL ORDER BY coverage_pct",
                ),
            )
        else:
            s.add(Note(f"No power for {ctx.date}.", "missing"))
    else:
        s.not_available(r.missing("power_1s", ("host", "gpu", "ts", "gap_before")))

    # Asset checks and materializations from the Dagster instance.
    h = ctx.history
    if not h.available:
        s.add(Note(f"Asset-check results not available: {h.note}.", "missing"))
    else:
        failed = [c for c in h.checks if not c.passed]
        s.headline["checks"] = {"evaluated": len(h.checks), "failed": len(failed), "failed_error": sum(1 for c in failed if c.severity == "ERROR")}
        if h.checks:
            cols = ["asset", "check", "result", "severity", "details", "evaluated"]

            def rows(checks):
                return [[c.asset, c.check, "passed" if c.passed else "FAILED", c.severity, c.description[:200], fmt_ts(c.timestamp)] for c in checks]

            passed = [c for c in h.checks if c.passed]
            if failed:
                s.add(Table(cols, rows(failed), f"Failed asset checks for {ctx.date}: {len(failed)} of {len(h.checks)} (ERROR first)."))
            else:
                s.add(Note(f"All {len(h.checks)} asset checks for {ctx.date} passed.", "info"))
            if passed:
                s.add(Collapsed(f"{len(passed)} passed check{'s' if len(passed) != 1 else ''} (open to list them)",
                                [Table(cols, rows(passed), f"Latest asset-check results for {ctx.date} that passed.")]))
        else:
            s.add(Note(f"No asset-check results recorded for {ctx.date}{': ' + h.note if h.note else ''}.", "missing"))
        if h.materializations:
            s.add(
                Table(
                    ["asset", "last materialized", "rows", "run"],
                    [[m.asset, fmt_ts(m.timestamp), m.rows, m.run_id[:8]] for m in h.materializations],
                    "Latest materialization of each asset for this day.",
                )
            )

    # Energy counter vs integrated power.
    counters = energy_counter(ctx)
    if counters:
        diffs = [abs(c["diff_pct"]) for c in counters]
        s.headline["energy_counter_vs_integrated"] = {
            "gpus": len(counters),
            "median_abs_diff_pct": num(statistics.median(diffs), 3),
            "max_abs_diff_pct": num(max(diffs), 3),
        }
        s.add(
            Table(
                ["host", "gpu", "counter (kJ)", "integrated power (kJ)", "difference (%)"],
                [[c["host"], c["gpu"], num(c["counter_j"] / 1e3, 2), num(c["integrated_j"] / 1e3, 2), num(c["diff_pct"], 3)] for c in counters[:5]],
                f"Energy counter vs integrated power for {len(counters)} GPU(s): median |difference| {statistics.median(diffs):.2f}%, "
                f"largest {max(diffs):.2f}% (the 5 largest shown).",
            )
        )
    else:
        s.add(Note("Energy counter vs integrated power: no GPU reported an energy counter (`power.energy_j`) this day.", "info"))

    # Quarantined raw files (moved out of their dataset by the pipeline, logged in the catalog).
    files_cols = ("dataset", "date", "path", "kind", "reason", "still_quarantined")
    if r.has("quarantined_files", files_cols):
        files = r.rows(
            f"""SELECT dataset, kind, count(*) AS files, count(*) FILTER (still_quarantined) AS still,
                       any_value(reason) AS reason, any_value(path) AS example
                FROM quarantined_files WHERE date::VARCHAR = '{ctx.date}' GROUP BY ALL ORDER BY dataset, kind"""
        )
        s.headline["quarantined_files"] = {f"{f['dataset']}:{f['kind']}": int(f["files"]) for f in files}
        if files:
            s.add(
                Table(
                    ["dataset", "kind", "files", "still in quarantine", "example", "reason"],
                    [[f["dataset"], f["kind"], int(f["files"]), int(f["still"]), f["example"], (f["reason"] or "")[:160]] for f in files],
                    f"Raw files of {ctx.date} set aside by the pipeline (unreadable, drifted from the contract, or duplicates; `converted` ones were used, "
                    f"rewritten in the contract's types); kept under {ctx.data_dir}/quarantine/files/.",
                ),
                Code("every quarantined file of the day", f"SELECT * FROM quarantined_files WHERE date = '{ctx.date}' ORDER BY at"),
            )
        else:
            s.add(Note(f"No raw file of {ctx.date} was quarantined.", "info"))

    # Quarantined rows (ingestion's per-line rejects).
    q = quarantine(ctx.data_dir, ctx.date)
    s.headline["quarantined_rows"] = q.by_dataset
    if q.by_dataset:
        s.add(
            Table(
                ["dataset", "reason", "rows"],
                [[d, reason, n] for d, reason, n in q.reasons] or [[d, "(no reason column)", n] for d, n in q.by_dataset.items()],
                f"Quarantined rows for {ctx.date}: "
                + ", ".join(f"{d}: {n:,}" for d, n in sorted(q.by_dataset.items()))
                + f" (under {ctx.data_dir}/quarantine/).",
            )
        )
    else:
        s.add(Note(f"No quarantined rows for {ctx.date}.", "info"))
    return s
