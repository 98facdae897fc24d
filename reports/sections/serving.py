"""Serving efficiency: J per output token against time per output token and time to first token
(the frontier an operating point is picked from), by model, batch bucket, GPUs per replica and GPU
model; and what lower power caps would do (`power_cap_whatif`, with its ranges)."""

from __future__ import annotations

import re

import altair as alt

from reports import charts
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num
from reports.sections.inference import MIN_BUCKET_REQUESTS

TITLE = "Serving efficiency and power caps"
EPT_COLS = ("endpoint", "bucket_kind", "bucket", "j_per_output_token")
LATENCY_COLS = ("tpot_p50_ms", "ttft_p50_ms")
"""energy_per_token's latency columns the frontier needs (the p90/p99 ones are shown when present)."""
META_COLS = ("model", "gpus_per_replica", "gpu_model")
CAP_COLS = ("level", "entity", "phase", "cap_factor", "cap_w", "enforced_limit_w", "gpu_model", "energy_j", "time_above_share",
            "energy_above_share", "energy_above_cap_j", "alpha", "alpha_low", "alpha_high", "alpha_source", "est_energy_j",
            "est_energy_low_j", "est_energy_high_j", "gpu_seconds", "est_gpu_seconds", "est_gpu_seconds_low", "est_gpu_seconds_high",
            "p99_2s_w", "max_2s_w", "provisioned_w", "extra_hosts_at_cap")
LATENCIES = (("tpot", "time per output token, p50 (ms)"), ("ttft", "time to first token, p50 (ms)"))


def _order(bucket) -> float:
    m = re.search(r"-?\d+(\.\d+)?", str(bucket))
    return float(m.group()) if m else float("inf")


def _pct(value) -> float | None:
    return None if value is None else 100 * value


def frontier(points: list[dict], x: str) -> set[int]:
    """Indices of the points no other point beats on both ``x`` and J per output token (lower is better)."""
    best, keep = float("inf"), set()
    for i in sorted(range(len(points)), key=lambda i: (points[i][x], points[i]["j"])):
        if points[i]["j"] < best:
            best = points[i]["j"]
            keep.add(i)
    return keep


def frontier_chart(rows: list[dict]) -> alt.HConcatChart:
    """rows: series (model · GPUs per replica · GPU model), bucket, order, tpot, ttft, j, frontier_tpot, frontier_ttft."""
    panels = []
    for key, title in LATENCIES:
        base = alt.Chart(charts.inline(rows)).transform_filter(f"isValid(datum.{key})")
        line = base.mark_line(opacity=0.5).encode(
            x=alt.X(f"{key}:Q", title=title, scale=alt.Scale(zero=False)),
            y=alt.Y("j:Q", title="J per output token", scale=alt.Scale(zero=False)),
            color=alt.Color("series:N", title="model · GPUs/replica · GPU"),
            order=alt.Order("order:Q"),
        )
        pts = base.mark_point(filled=True, size=70).encode(
            x=alt.X(f"{key}:Q"), y=alt.Y("j:Q"), color=alt.Color("series:N"),
            shape=alt.Shape(f"frontier_{key}:N", title="on the frontier", scale=alt.Scale(domain=[True, False], range=["diamond", "circle"])),
            tooltip=[alt.Tooltip("series:N"), alt.Tooltip("bucket:N", title="batch bucket"), alt.Tooltip(f"{key}:Q", format=".1f"),
                     alt.Tooltip("j:Q", format=".3f", title="J / output token")],
        )
        text = base.mark_text(dx=8, dy=-6, fontSize=9, color="#555").encode(x=alt.X(f"{key}:Q"), y=alt.Y("j:Q"), text=alt.Text("bucket:N"))
        panels.append(alt.layer(line, pts, text).properties(width=(charts.WIDTH - 120) // 2, height=charts.HEIGHT))
    return alt.hconcat(*panels).properties(
        title="J per output token against latency, one point per batch-size bucket (lower left is better; diamonds: the frontier)")


def cap_chart(rows: list[dict]) -> alt.LayerChart:
    """rows: entity, cap, duration_pct, energy_pct, energy_low_pct, energy_high_pct."""
    base = alt.Chart(charts.inline(rows))
    bars = base.mark_rule().encode(
        x=alt.X("duration_pct:Q", title="estimated GPU-time change (%)"),
        y=alt.Y("energy_low_pct:Q", title="estimated energy change (%)"), y2=alt.Y2("energy_high_pct:Q"), color=alt.Color("entity:N"))
    pts = base.mark_point(filled=True, size=60).encode(
        x=alt.X("duration_pct:Q"), y=alt.Y("energy_pct:Q"), color=alt.Color("entity:N"),
        tooltip=[alt.Tooltip("entity:N"), alt.Tooltip("cap:N"), alt.Tooltip("energy_pct:Q", format=".1f"), alt.Tooltip("duration_pct:Q", format=".1f")])
    text = base.mark_text(dx=10, fontSize=9, color="#555").encode(x=alt.X("duration_pct:Q"), y=alt.Y("energy_pct:Q"), text=alt.Text("cap:N"))
    return alt.layer(bars, pts, text).properties(
        width=charts.WIDTH, height=charts.HEIGHT,
        title="Estimated energy against GPU-time under each cap (α model; bars: α low to high)")


def _frontier(ctx: Ctx, s: Section) -> None:
    r = ctx.reader
    if not r.has("energy_per_token", EPT_COLS):
        s.not_available(r.missing("energy_per_token", EPT_COLS) + ": the energy-latency frontier")
        return
    lacking = [c for c in LATENCY_COLS if c not in r.columns("energy_per_token")]
    if lacking:
        s.add(Note(f"`energy_per_token` has no latency columns ({', '.join(lacking)}): the J-per-token-against-latency "
                   "frontier is skipped; J per token by batch bucket is in the inference section.", "info"))
        return
    cols = r.columns("energy_per_token")
    meta = [c if c in cols else f"NULL AS {c}" for c in META_COLS]
    extra = [c for c in ("tpot_p90_ms", "tpot_p99_ms", "ttft_p90_ms", "ttft_p99_ms", "output_tokens_per_s_per_gpu") if c in cols]
    rel = r.day_relation("energy_per_token", ctx.date)
    # A bucket without energy (0 J) or with too few requests with power would sit on the frontier by accident.
    enough = f"j_per_output_token > 0 AND ({'requests_with_power' if 'requests_with_power' in cols else 'NULL'} >= {MIN_BUCKET_REQUESTS}) IS NOT false"
    rows = r.rows(
        f"""SELECT endpoint, bucket::VARCHAR AS bucket, j_per_output_token, tpot_p50_ms, ttft_p50_ms, {', '.join(meta + extra)}, ({enough}) AS kept
            FROM {rel} WHERE bucket_kind = 'batch_size' AND j_per_output_token IS NOT NULL
              AND (tpot_p50_ms IS NOT NULL OR ttft_p50_ms IS NOT NULL)
            ORDER BY endpoint, bucket"""
    )
    left_out = sum(1 for x in rows if not x["kept"])
    rows = [x for x in rows if x["kept"]]
    if not rows:
        s.add(Note("`energy_per_token` has no batch-size bucket with both J per output token and a latency this day"
                   + (f" ({left_out} left out: 0 J per output token or fewer than {MIN_BUCKET_REQUESTS} requests with power)." if left_out else "."), "info"))
        return
    points = []
    for x in rows:
        series = " · ".join(str(v) for v in (x["model"] or x["endpoint"], f"{x['gpus_per_replica']} GPU/replica" if x["gpus_per_replica"] else None,
                                             x["gpu_model"]) if v)
        points.append({"series": series, "endpoint": x["endpoint"], "bucket": x["bucket"], "order": _order(x["bucket"]),
                       "tpot": num(x["tpot_p50_ms"], 3), "ttft": num(x["ttft_p50_ms"], 3), "j": num(x["j_per_output_token"], 5),
                       **{c: num(x[c], 3) for c in extra}})
    points = points[: charts.MAX_POINTS // 3]
    for key, _ in LATENCIES:
        valid = [i for i, p in enumerate(points) if p[key] is not None]
        on = frontier([points[i] for i in valid], key)
        for k, i in enumerate(valid):
            points[i][f"frontier_{key}"] = k in on
    s.add(Chart("serving_frontier", frontier_chart(points),
                "From `energy_per_token` (bucket_kind = 'batch_size'): J per output token against the p50 time per output token "
                "and time to first token of each batch bucket, per model, GPUs per replica and GPU model. An operating point on the "
                "frontier (diamonds) is one no other bucket beats on both energy and latency."
                + (f" {left_out} bucket(s) left out: 0 J per output token or fewer than {MIN_BUCKET_REQUESTS} requests with power." if left_out else "")))
    head = ["series", "batch bucket", "J / output token", "TPOT p50 (ms)", "TTFT p50 (ms)"] + [c.replace("_", " ") for c in extra]
    s.add(Table(head, [[p["series"], p["bucket"], p["j"], p["tpot"], p["ttft"], *(p[c] for c in extra)]
                       for p in sorted(points, key=lambda p: (p["series"], p["order"]))][:200]))
    s.headline["frontier_points"] = len(points)


def _caps(ctx: Ctx, s: Section) -> None:
    r = ctx.reader
    if not r.has("power_cap_whatif", CAP_COLS):
        s.not_available(r.missing("power_cap_whatif", CAP_COLS) + ": the power-cap table")
        return
    rel = r.day_relation("power_cap_whatif", ctx.date)
    rows = r.rows(
        f"""SELECT a.*, pre.time_above_share AS prefill_above_share
            FROM {rel} AS a
            LEFT JOIN {rel} AS pre ON pre.level = a.level AND pre.entity = a.entity AND pre.cap_factor = a.cap_factor AND pre.phase = 'prefill'
            WHERE a.phase = 'all' AND a.level IN ('endpoint', 'job')
            ORDER BY a.level, a.entity, a.cap_factor DESC LIMIT 400"""
    )
    if not rows:
        s.add(Note("`power_cap_whatif` has no endpoint or job rows this day.", "info"))
    else:
        def change(est, obs):
            return None if est is None or not obs else num(100 * (est / obs - 1), 1)

        table = []
        points = []
        for x in rows:
            e, e_lo, e_hi = (change(x[c], x["energy_j"]) for c in ("est_energy_j", "est_energy_low_j", "est_energy_high_j"))
            t, t_lo, t_hi = (change(x[c], x["gpu_seconds"]) for c in ("est_gpu_seconds", "est_gpu_seconds_low", "est_gpu_seconds_high"))
            source = x["alpha_source"] or ""
            table.append([
                x["level"], x["entity"], x["gpu_model"], f"{x['cap_factor']:.0%}", num(x["cap_w"], 0),
                num(_pct(x["time_above_share"]), 2), num(_pct(x["prefill_above_share"]), 2), num(_pct(x["energy_above_share"]), 2),
                num(x["energy_above_cap_j"] / 3.6e3 if x["energy_above_cap_j"] is not None else None, 3),
                e, f"{e_lo} to {e_hi}" if e_lo is not None else None, t, f"{t_lo} to {t_hi}" if t_lo is not None else None,
                f"{num(x['alpha'], 2)} ({num(x['alpha_low'], 2)}–{num(x['alpha_high'], 2)})",
                "uncalibrated" if "uncalibrated" in source else source.split(":")[0],
            ])
            if x["cap_factor"] < 1 and e is not None and t is not None:
                points.append({"entity": x["entity"], "cap": f"{x['cap_factor']:.0%}", "energy_pct": e, "duration_pct": t,
                               "energy_low_pct": e_lo, "energy_high_pct": e_hi})
        if points:
            s.add(Chart("power_cap_tradeoff", cap_chart(points[: charts.MAX_POINTS]),
                        "From `power_cap_whatif` (phase 'all'): the α model's estimate for each cap below the enforced limit."))
        s.add(Table(
            ["level", "entity", "GPU model", "cap (% of limit)", "cap (W)", "time above cap (%)", "prefill time above cap (%)",
             "energy above share (%)", "energy above cap (Wh)", "est. energy change (%)", "energy range (%)", "est. GPU-time change (%)",
             "GPU-time range (%)", "α (low–high)", "α source"],
            table,
            "Power caps, observed and estimated (`power_cap_whatif`, 1 s means). At 100 % the row is the observed day. Below it, "
            "each second whose 1 s mean P̄ exceeds the cap runs at the cap for (P̄/cap)^α s: ranges from α low to high; "
            "'uncalibrated' marks a GPU model with no published measurement (docs/serving.md).",
        ))
        s.headline["power_caps"] = {
            f"{x['level']}:{x['entity']}@{x['cap_factor']:g}": {"time_above_share": num(x["time_above_share"], 4),
                                                                 "est_energy_change_pct": change(x["est_energy_j"], x["energy_j"])}
            for x in rows[:60]
        }
    clusters = r.rows(
        f"""SELECT entity, cap_factor, cap_w, provisioned_w, p99_2s_w, max_2s_w, extra_hosts_at_cap
            FROM {rel} WHERE level = 'cluster' AND phase = 'all' ORDER BY entity, cap_factor DESC LIMIT 200"""
    )
    if clusters:
        s.add(Table(
            ["cluster", "cap (% of limit)", "provisioned (W)", "p99 2 s under the cap (W)", "max 2 s under the cap (W)", "extra hosts at cap"],
            [[x["entity"], f"{x['cap_factor']:.0%}", num(x["provisioned_w"], 0), num(x["p99_2s_w"], 0), num(x["max_2s_w"], 0),
              x["extra_hosts_at_cap"]] for x in clusters],
            "Provisioned side: the cluster's summed power with every GPU's 1 s mean held at its cap, as 2 s means; extra hosts "
            "at cap: hosts like the cluster's (Σ of their GPUs' caps) that fit under provisioned power on top of the max 2 s "
            "if all drew their caps at once (a bound; `power_headroom` resamples the uncapped fleet).",
        ))
    s.add(Code("every cap row", f"SELECT * FROM power_cap_whatif WHERE date = DATE '{ctx.date}' ORDER BY level, entity, phase, cap_factor DESC"))


def build(ctx: Ctx) -> Section:
    s = Section("serving", TITLE)
    _frontier(ctx, s)
    _caps(ctx, s)
    return s
