"""5. Cross-endpoint correlation heatmap and coincidence factors."""

from __future__ import annotations

from reports import charts
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num

TITLE = "Do endpoints peak together?"
CORR_COLS = ("a", "b", "pearson_1s", "spike_cooccurrence", "best_lag_s")
COIN_COLS = ("level", "entity", "coincidence_factor", "smoothing_ratio", "members")
MAX_HEATMAP = 60  # endpoints: 60 × 60 = 3,600 cells


def build(ctx: Ctx) -> Section:
    s = Section("correlation", TITLE)
    r = ctx.reader
    if r.has("endpoint_correlation", CORR_COLS):
        rel = r.day_relation("endpoint_correlation", ctx.date)
        endpoints = set()
        held = ctx.endpoint_gpus()  # the endpoints that held GPUs that day
        if held is not None:
            endpoints = {x["endpoint"] for x in r.rows(f"SELECT DISTINCT endpoint FROM ({held})")}
        lift = "spike_lift" if r.has("endpoint_correlation", (*CORR_COLS, "spike_lift")) else "NULL::DOUBLE AS spike_lift"
        pairs = r.rows(f"SELECT a, b, pearson_1s, spike_cooccurrence, {lift}, best_lag_s FROM {rel} ORDER BY a, b")
        between = [p for p in pairs if p["a"] in endpoints and p["b"] in endpoints] or pairs
        names = sorted({p["a"] for p in between} | {p["b"] for p in between})[:MAX_HEATMAP]
        keep = set(names)
        cells = {(n, n): 1.0 for n in names}
        for p in between:
            if p["a"] in keep and p["b"] in keep and p["pearson_1s"] is not None:
                cells[(p["a"], p["b"])] = cells[(p["b"], p["a"])] = num(p["pearson_1s"], 3)
        if between:
            s.add(Chart("correlation_heatmap", charts.correlation_heatmap([{"a": a, "b": b, "r": v} for (a, b), v in sorted(cells.items())]),
                        "Pearson correlation of the endpoints' 1 s power (`endpoint_correlation`); near 0: their peaks mostly cancel in the sum."))
            unordered = {}
            for p in between:  # a table may hold both (a, b) and (b, a): show each pair once
                unordered.setdefault(tuple(sorted((p["a"], p["b"]))), p)
            top = sorted(unordered.values(), key=lambda p: -(p["pearson_1s"] if p["pearson_1s"] is not None else -2))[:10]
            s.add(
                Table(
                    ["a", "b", "Pearson r (1 s)", "spike co-occurrence, ±1 s (%)", "spike lift (× chance)", "best lag (s)"],
                    [
                        [
                            p["a"],
                            p["b"],
                            num(p["pearson_1s"], 3),
                            num(100 * p["spike_cooccurrence"] if p["spike_cooccurrence"] is not None else None),
                            num(p["spike_lift"], 2),
                            num(p["best_lag_s"], 1),
                        ]
                        for p in top
                    ],
                    "Most correlated pairs. Spike co-occurrence: share of a's spikes (1 s excursions above its own level) that meet a spike "
                    "of b within ±1 s; spike lift: that share over what chance gives for b's spike rate (1 = independent, "
                    "the assumption of the swing-at-scale projection; well above 1 = they spike together).",
                )
            )
        else:
            s.add(Note(f"`endpoint_correlation` has no pairs for {ctx.date} (fewer than two endpoints?).", "info"))
    else:
        s.not_available(r.missing("endpoint_correlation", CORR_COLS) + ": the correlation heatmap")
    if r.has("coincidence", COIN_COLS):
        rows = r.rows(
            f"""SELECT level, entity, coincidence_factor, smoothing_ratio, members FROM {r.day_relation('coincidence', ctx.date)}
                ORDER BY CASE level WHEN 'fleet' THEN 0 WHEN 'role' THEN 1 WHEN 'cluster' THEN 2 ELSE 3 END, entity"""
        )
        shown = [x for x in rows if x["level"] != "host"]
        hosts = [x for x in rows if x["level"] == "host"]
        shown += sorted(hosts, key=lambda x: -(x["coincidence_factor"] or 0))[: max(0, 40 - len(shown))]
        bars = [{"level": x["level"], "entity": x["entity"], "factor": num(x["coincidence_factor"], 3)} for x in shown if x["coincidence_factor"] is not None]
        if bars:
            s.add(
                Chart(
                    "coincidence",
                    charts.coincidence_bars(bars),
                    "Coincidence factor = max of the domain's summed power ÷ sum of its members' maxima (hosts: the 40 highest are shown).",
                )
            )
        s.headline["coincidence_factor"] = {f"{x['level']}:{x['entity']}": num(x["coincidence_factor"], 3) for x in rows if x["level"] != "host"}
        s.add(
            Table(
                ["level", "entity", "coincidence factor", "smoothing ratio", "members"],
                [[x["level"], x["entity"], num(x["coincidence_factor"], 3), num(x["smoothing_ratio"], 3), x["members"]] for x in shown[:40]],
            ),
            Code("every domain", f"SELECT * FROM coincidence WHERE date = DATE '{ctx.date}' ORDER BY coincidence_factor DESC"),
        )
    else:
        s.not_available(r.missing("coincidence", COIN_COLS) + ": coincidence factors")
    return s
