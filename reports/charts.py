"""The report's Altair charts, one function each. Inputs are already aggregated rows (lists of
dicts, times as epoch milliseconds UTC): every chart stays within ``MAX_POINTS`` data rows."""

from __future__ import annotations

import re

import altair as alt

MAX_POINTS = 5000
WIDTH = 760
HEIGHT = 260

ROLE_COLORS = alt.Scale(domain=["training", "inference"], range=["#d95f02", "#1b9e77"])
PHASE_COLORS = alt.Scale(domain=["prefill", "decode", "idle"], range=["#fdae6b", "#c6dbef", "#f0f0f0"])


def inline(rows) -> alt.Data:
    """A chart's rows as inline data, held as a tuple: altair deep-copies every list and dict of a
    chart each time it is layered, combined or given properties (each row of a layered chart,
    several times), but keeps a tuple by reference. The page embeds the same values."""
    return alt.Data(values=tuple(rows))


def _time_x(field: str = "t", title: str = "time (UTC)", fmt: str = "%H:%M") -> alt.X:
    return alt.X(f"{field}:T", scale=alt.Scale(type="utc"), axis=alt.Axis(format=fmt, title=title, labelOverlap=True))


TITLE_KEYS = frozenset({"title", "subtitle"})


def _plain(text: str) -> str:
    """A caption's `name` as plain text: a chart title is drawn as text, where backticks show."""
    return re.sub(r"`([^`]*)`", r"\1", text).replace("`", "")


def plain_titles(node, in_title: bool = False):
    """The spec with every title, subtitle (chart, axis, legend, header) and tooltip title as
    plain text: backticks, Markdown for code in the report's captions, taken out."""
    if isinstance(node, dict):
        return {k: plain_titles(v, in_title or k in TITLE_KEYS) if k not in ("data", "datasets") else v
                for k, v in node.items()}
    if isinstance(node, list):
        return [plain_titles(v, in_title) for v in node]
    if in_title and isinstance(node, str):
        return _plain(node)
    return node


def count_points(spec: dict) -> int:
    """Data rows embedded in a Vega-Lite spec (inline datasets and values)."""
    total = sum(len(v) for v in spec.get("datasets", {}).values())

    def walk(node):
        nonlocal total
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and isinstance(data.get("values"), list):
                total += len(data["values"])
            for key, value in node.items():
                if key != "datasets":
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in spec.items() if k != "datasets"})
    return total


def role_pct_bars(rows: list[dict]) -> alt.Chart:
    """rows: role, stat (the day's mean, then the peak named with its resolution), pct (of provisioned)."""
    stats = list(dict.fromkeys(r["stat"] for r in rows))
    return (
        alt.Chart(inline(rows), title="Mean and peak power by role, % of provisioned")
        .mark_bar()
        .encode(
            y=alt.Y("role:N", title=None),
            yOffset=alt.YOffset("stat:N", sort=stats),
            x=alt.X("pct:Q", title="% of provisioned power"),
            color=alt.Color("stat:N", title="statistic", scale=alt.Scale(domain=stats, range=["#9ecae1", "#3182bd"][: len(stats)])),
            tooltip=[alt.Tooltip("role:N"), alt.Tooltip("stat:N"), alt.Tooltip("pct:Q", format=".1f")],
        )
        .properties(width=WIDTH, height=40 + 40 * len({r["role"] for r in rows}))
    )


def swing_projection(rows: list[dict], published: list[dict]) -> alt.LayerChart:
    """rows: kind, entity, gpus, pct, low, high, method; published: kind, gpus, pct (the published figure)."""
    base = alt.Chart(inline(rows))
    x = alt.X("gpus:Q", scale=alt.Scale(type="log", base=2), title="GPUs summed (log scale)")
    color = alt.Color("series:N", title="kind / entity")
    band = base.mark_area(opacity=0.2).encode(x=x, y=alt.Y("low:Q", title="max 2 s swing, 100 ms grid (% of provisioned)"), y2=alt.Y2("high:Q"), color=color)
    line = base.mark_line(point=True).encode(
        x=x, y=alt.Y("pct:Q"), color=color, strokeDash=alt.StrokeDash("method:N", title="method"),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("method:N"), alt.Tooltip("gpus:Q"), alt.Tooltip("pct:Q", format=".1f"),
                 alt.Tooltip("low:Q", format=".1f"), alt.Tooltip("high:Q", format=".1f")],
    )
    pub = alt.Chart(inline(published)).mark_point(shape="diamond", size=90, filled=True, color="black").encode(
        x=alt.X("gpus:Q"), y=alt.Y("pct:Q"), tooltip=[alt.Tooltip("kind:N"), alt.Tooltip("gpus:Q"), alt.Tooltip("pct:Q", title="published max 2 s swing (%)")])
    return (band + line + pub).properties(
        width=WIDTH, height=260,
        title=alt.TitleParams("Swing at scale: max 2 s swing of the summed endpoints / job hosts",
                              subtitle="Beyond the observed: inference assumes independent endpoints (spike lift ≈ 1), "
                                       "training stays in step; ◆ published figures"),
    )


def headroom_bars(rows: list[dict]) -> alt.LayerChart:
    """rows: entity, stat ('p99 2 s' | 'max 2 s'), pct (of provisioned)."""
    base = alt.Chart(inline(rows), title="Observed 2 s power per cluster, % of provisioned (100% = provisioned)")
    bars = base.mark_bar().encode(
        y=alt.Y("entity:N", title="cluster"),
        yOffset=alt.YOffset("stat:N"),
        x=alt.X("pct:Q", title="% of provisioned", scale=alt.Scale(domainMax=100)),
        color=alt.Color("stat:N", title=None, scale=alt.Scale(range=["#bcbddc", "#756bb1"])),
        tooltip=[alt.Tooltip("entity:N"), alt.Tooltip("stat:N"), alt.Tooltip("pct:Q", format=".1f")],
    )
    rule = alt.Chart(inline([{"x": 100}])).mark_rule(color="#a50f15", strokeDash=[4, 3]).encode(x=alt.X("x:Q"))
    return alt.layer(bars, rule).properties(width=WIDTH, height=40 + 36 * len({r["entity"] for r in rows}))


def fleet_power(area: list[dict], envelope: list[dict], rules: list[dict], bucket_s: int, unit: str = "W") -> alt.LayerChart:
    """``unit``: the power values' unit (W or kW). area: t, role, w (bucket mean); envelope: t, w (max 2 s mean of the fleet in the bucket);
    rules: label, w (provisioned lines)."""
    bucket = f"{bucket_s // 60} min" if bucket_s % 60 == 0 else f"{bucket_s} s"
    title = f"Fleet power by role ({bucket} means, stacked) with the fleet's 2 s max envelope"
    stack = (
        alt.Chart(inline(area))
        .mark_area(opacity=0.8)
        .encode(
            x=_time_x(),
            y=alt.Y("w:Q", stack="zero", title=f"power ({unit}, {bucket} means)"),
            color=alt.Color("role:N", scale=ROLE_COLORS, title="role"),
            order=alt.Order("role:N", sort="descending"),
            tooltip=[alt.Tooltip("t:T", format="%H:%M", formatType="utc"), alt.Tooltip("role:N"),
                     alt.Tooltip("w:Q", format=",.1f", title=f"{bucket} mean ({unit})")],
        )
    )
    env = (
        alt.Chart(inline(envelope))
        .mark_line(color="#333333", strokeWidth=1)
        .encode(
            x=_time_x(),
            y=alt.Y("w:Q"),
            tooltip=[alt.Tooltip("t:T", format="%H:%M", formatType="utc"), alt.Tooltip("w:Q", format=",.1f", title=f"2 s max in the {bucket} ({unit})")],
        )
    )
    rule = alt.Chart(inline(rules)).mark_rule(strokeDash=[6, 4], color="#a50f15").encode(y=alt.Y("w:Q"), tooltip=[alt.Tooltip("label:N")])
    text = alt.Chart(inline(rules)).mark_text(align="left", dx=4, dy=-6, color="#a50f15", fontSize=10).encode(
        y=alt.Y("w:Q"), x=alt.XValue(0), text=alt.Text("label:N"))
    return alt.layer(stack, env, rule, text, title=title).properties(width=WIDTH, height=HEIGHT + 40)


def swing_ecdf(curves: list[dict], marks: list[dict]) -> alt.LayerChart | alt.FacetChart:
    """curves: role, window, q (0..1), pct (swing % of provisioned) from the 1 s series;
    marks: role, window, stat, q, pct from swing_stats' instantaneous trace (may be empty)."""
    windows = sorted({c["window"] for c in curves}, key=lambda w: int(w.split()[0]))
    line = (
        alt.Chart()
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("pct:Q", title="swing within the window (% of provisioned)"),
            y=alt.Y("q:Q", title="share of windows (ECDF, 0–1)", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("role:N", scale=ROLE_COLORS),
            tooltip=[alt.Tooltip("role:N"), alt.Tooltip("window:N"), alt.Tooltip("q:Q", format=".2f"), alt.Tooltip("pct:Q", format=".2f")],
        )
    )
    layers = [line.properties(data=inline(curves))]
    if marks:
        layers.append(
            alt.Chart(inline(marks))
            .mark_point(filled=True, size=50, shape="diamond")
            .encode(
                x=alt.X("pct:Q"),
                y=alt.Y("q:Q"),
                color=alt.Color("role:N", scale=ROLE_COLORS),
                tooltip=[alt.Tooltip("role:N"), alt.Tooltip("window:N"), alt.Tooltip("stat:N"), alt.Tooltip("pct:Q", format=".2f")],
            )
        )
    # One panel per window, each with only its own rows (a facet of a multi-source layer is not allowed).
    panels = []
    for w in windows:
        panel_layers = [line.properties(data=inline([c for c in curves if c["window"] == w]))]
        own_marks = [m for m in marks if m["window"] == w]
        if own_marks:
            panel_layers.append(layers[1].properties(data=inline(own_marks)))
        panels.append(alt.layer(*panel_layers, title=f"{w} windows").properties(width=(WIDTH - 60) // max(1, len(windows)), height=HEIGHT - 40))
    return alt.hconcat(*panels, title="Power swing distribution per role and window (lines: 1 s series; ◆: p50/p99/max of the instantaneous trace)")


def endpoint_window(power: list[dict], segments: list[dict], endpoint: str, resolution: str) -> alt.LayerChart:
    """power: t, w; segments: start, end, phase (shading, may be empty)."""
    layers = []
    if segments:
        layers.append(
            alt.Chart(inline(segments))
            .mark_rect(opacity=0.6)
            .encode(
                x=_time_x("start", fmt="%H:%M:%S"),
                x2=alt.X2("end:T"),
                color=alt.Color("phase:N", scale=PHASE_COLORS, title="phase"),
                tooltip=[
                    alt.Tooltip("phase:N"),
                    alt.Tooltip("start:T", format="%H:%M:%S.%L", formatType="utc"),
                    alt.Tooltip("end:T", format="%H:%M:%S.%L", formatType="utc"),
                ],
            )
        )
    layers.append(
        alt.Chart(inline(power))
        .mark_line(color="#08306b", strokeWidth=1)
        .encode(
            x=_time_x(fmt="%H:%M:%S"),
            y=alt.Y("w:Q", title="endpoint power (W)"),
            tooltip=[alt.Tooltip("t:T", format="%H:%M:%S.%L", formatType="utc"), alt.Tooltip("w:Q", format=",.0f")],
        )
    )
    return alt.layer(*layers, title=f"{endpoint}: power over 5 minutes ({resolution}) with prefill/decode shading").properties(width=WIDTH, height=HEIGHT)


def phase_shares(rows: list[dict]) -> alt.Chart:
    """rows: endpoint, share_of ('time' | 'energy'), share (0..1)."""
    return (
        alt.Chart(inline(rows), title="Prefill share of time and of energy per endpoint")
        .mark_bar()
        .encode(
            y=alt.Y("endpoint:N", title=None),
            yOffset=alt.YOffset("share_of:N"),
            x=alt.X("share:Q", title="prefill share (%)", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("share_of:N", title="share of", scale=alt.Scale(range=["#fdae6b", "#e6550d"])),
            tooltip=[alt.Tooltip("endpoint:N"), alt.Tooltip("share_of:N"), alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(width=WIDTH, height=40 + 36 * len({r["endpoint"] for r in rows}))
    )


def j_per_token(rows: list[dict]) -> alt.Chart:
    """rows: endpoint, bucket, order, token ('prompt' | 'output'), j."""
    order = [b for _, b in sorted({(r["order"], r["bucket"]) for r in rows})]
    return (
        alt.Chart(inline(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("bucket:O", sort=order, title="batch size (concurrent requests)"),
            y=alt.Y("j:Q", title="energy per token (J)"),
            color=alt.Color("endpoint:N"),
            tooltip=[alt.Tooltip("endpoint:N"), alt.Tooltip("bucket:O"), alt.Tooltip("token:N"), alt.Tooltip("j:Q", format=".3f")],
        )
        .properties(width=(WIDTH - 80) // 2, height=HEIGHT - 40)
        .facet(column=alt.Column("token:N", title="J per prompt / output token"))
        .resolve_scale(y="independent")
        .properties(title="Energy per token by endpoint and batch-size bucket")
    )


def correlation_heatmap(rows: list[dict]) -> alt.LayerChart:
    """rows: a, b, r (Pearson of 1 s power), symmetric with the diagonal."""
    names = sorted({r["a"] for r in rows})
    size = max(160, min(WIDTH - 200, 40 * len(names)))
    base = alt.Chart(inline(rows)).encode(x=alt.X("a:N", title=None, sort=names), y=alt.Y("b:N", title=None, sort=names))
    rect = base.mark_rect().encode(
        color=alt.Color("r:Q", title="Pearson r", scale=alt.Scale(scheme="redblue", domain=[-1, 1], reverse=True)),
        tooltip=[alt.Tooltip("a:N"), alt.Tooltip("b:N"), alt.Tooltip("r:Q", format=".3f")],
    )
    layers = [rect]
    if len(names) <= 16:
        layers.append(base.mark_text(fontSize=10).encode(text=alt.Text("r:Q", format=".2f")))
    return alt.layer(*layers, title="Correlation of 1 s power between inference endpoints").properties(width=size, height=size)


def coincidence_bars(rows: list[dict]) -> alt.LayerChart:
    """rows: level, entity, factor (coincidence factor, 0..1)."""
    bars = (
        alt.Chart(inline(rows))
        .mark_bar()
        .encode(
            y=alt.Y("entity:N", sort="-x", title=None),
            x=alt.X("factor:Q", title="coincidence factor (max of sum ÷ sum of members' max, 0–1)", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("level:N", title="level"),
            tooltip=[alt.Tooltip("level:N"), alt.Tooltip("entity:N"), alt.Tooltip("factor:Q", format=".3f")],
        )
    )
    return alt.layer(bars, title="Coincidence factor per power domain (1.0 = members peak together)").properties(width=WIDTH - 160, height=30 + 18 * len(rows))


def diurnal(power: list[dict], requests: list[dict], profile: list[dict]) -> alt.VConcatChart:
    """power: day, role, hour, w; requests: day, hour, rps; profile: role, hour, mean, p5, p95."""
    days = sorted({p["day"] for p in power} | {r["day"] for r in requests})
    day_color = alt.Color("day:N", title="day", scale=alt.Scale(domain=days, range=day_ramp(len(days))))
    x = alt.X("hour:Q", title="hour of day (UTC)", scale=alt.Scale(domain=[0, 23]), axis=alt.Axis(tickCount=12))
    power_layers = []
    if profile:
        power_layers.append(
            alt.Chart(inline(profile))
            .mark_area(opacity=0.2, color="#636363")
            .encode(
                x=x, y=alt.Y("p5:Q", title="mean power (W)"), y2=alt.Y2("p95:Q"), detail=alt.Detail("role:N"),
                tooltip=[alt.Tooltip("role:N"), alt.Tooltip("hour:Q"), alt.Tooltip("mean:Q", format=",.0f")],
            )
        )
    power_layers.append(
        alt.Chart(inline(power))
        .mark_line(point=alt.OverlayMarkDef(size=30))
        .encode(
            x=x,
            y=alt.Y("w:Q", title="mean power (W)"),
            color=day_color,
            strokeDash=alt.StrokeDash("role:N", title="role"),
            tooltip=[alt.Tooltip("day:N"), alt.Tooltip("role:N"), alt.Tooltip("hour:Q"), alt.Tooltip("w:Q", format=",.0f")],
        )
    )
    top = alt.layer(*power_layers, title="Power by hour of day, one line per day (band: diurnal_profile p5–p95)").properties(width=WIDTH, height=HEIGHT - 40)
    charts = [top]
    if requests:
        charts.append(
            alt.Chart(inline(requests), title="Request rate by hour of day, one line per day")
            .mark_line(point=alt.OverlayMarkDef(size=30))
            .encode(x=x, y=alt.Y("rps:Q", title="request rate (requests/s)"), color=day_color,
                    tooltip=[alt.Tooltip("day:N"), alt.Tooltip("hour:Q"), alt.Tooltip("rps:Q", format=".2f")])
            .properties(width=WIDTH, height=HEIGHT - 80)
        )
    return alt.vconcat(*charts).resolve_scale(color="shared")


def day_ramp(n: int, light: str = "#9ecae1", dark: str = "#08306b") -> list[str]:
    """``n`` colours from light (oldest day) to dark (the report's day)."""
    a = [int(light[i : i + 2], 16) for i in (1, 3, 5)]
    b = [int(dark[i : i + 2], 16) for i in (1, 3, 5)]
    if n <= 1:
        return [dark]
    return ["#" + "".join(f"{round(x + (y - x) * k / (n - 1)):02x}" for x, y in zip(a, b, strict=False)) for k in range(n)]


def coverage_bars(rows: list[dict]) -> alt.LayerChart:
    """rows: host, role, coverage_pct (share of the day's GPU-seconds with data)."""
    bars = (
        alt.Chart(inline(rows))
        .mark_bar()
        .encode(
            x=alt.X("host:N", sort=None, title="host", axis=alt.Axis(labels=len(rows) <= 60)),
            y=alt.Y("coverage_pct:Q", title="coverage of the day (%)", scale=alt.Scale(domain=[0, 100])),
            color=alt.Color("role:N", scale=ROLE_COLORS),
            tooltip=[alt.Tooltip("host:N"), alt.Tooltip("role:N"), alt.Tooltip("coverage_pct:Q", format=".2f")],
        )
    )
    rule = alt.Chart(inline([{"y": 95}])).mark_rule(strokeDash=[4, 3], color="#a50f15").encode(y=alt.Y("y:Q"))
    return alt.layer(bars, rule, title="Power coverage per host (share of GPU-seconds with samples; dashed: 95%)").properties(width=WIDTH, height=HEIGHT - 60)
