"""1. Headline: fleet energy, mean/peak power per role, the swing table beside the published
reference points, headroom per cluster."""

from __future__ import annotations

from reports import charts
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num
from reports.sections.swings import grid_words

TITLE = "Headline"

# Published reference points: the largest power change within 2 s, as % of the cluster's
# provisioned power, reported by fleet studies of LLM training and inference clusters.
REFERENCE_2S_SWING_PCT = {"training": 37.5, "inference": 9.0}

SUMMARY_COLS = ("level", "entity", "mean_w", "max_w", "mean_pct", "max_pct", "energy_kwh", "provisioned_w")
SWING_COLS = ("level", "entity", "window_s", "series", "max_swing_w", "max_swing_pct", "p99_swing_w", "provisioned_w")
HEADROOM_COLS = ("level", "entity", "provisioned_w", "p99_2s_w", "p999_2s_w", "max_2s_w", "headroom_pct", "extra_hosts_estimate")


def role_stats(ctx: Ctx) -> tuple[list[dict], str] | None:
    """Per role: mean/peak W and % of provisioned, energy; from power_summary, else fleet_power_1s."""
    r = ctx.reader
    if r.has("power_summary", SUMMARY_COLS):
        rows = r.rows(
            f"""SELECT entity AS role, mean_w, max_w, mean_pct, max_pct, energy_kwh, provisioned_w
                FROM {r.day_relation('power_summary', ctx.date)} WHERE level = 'role' ORDER BY entity"""
        )
        if rows:
            return rows, "power_summary"
    if r.has("fleet_power_1s", ("level", "entity", "ts", "power_w", "energy_j")) and r.has("inventory_entities"):
        rows = r.rows(
            f"""WITH s AS (
                    SELECT ts, entity AS role, sum(power_w) AS w, sum(energy_j) AS e
                    FROM fleet_power_1s WHERE date = {ctx.sql_date()} AND level = 'role' GROUP BY ALL)
                SELECT s.role, avg(w) AS mean_w, max(w) AS max_w,
                       100 * avg(w) / any_value(i.provisioned_w) AS mean_pct,
                       100 * max(w) / any_value(i.provisioned_w) AS max_pct,
                       sum(e) / 3.6e6 AS energy_kwh, any_value(i.provisioned_w) AS provisioned_w
                FROM s LEFT JOIN inventory_entities i ON i.level = 'role' AND i.entity = s.role
                GROUP BY s.role ORDER BY s.role"""
        )
        if rows:
            return rows, "fleet_power_1s"
    return None


def fleet_energy_kwh(ctx: Ctx) -> tuple[float, str] | None:
    r = ctx.reader
    if r.has("power_summary", SUMMARY_COLS):
        value = r.one(f"SELECT sum(energy_kwh) FROM {r.day_relation('power_summary', ctx.date)} WHERE level = 'fleet'")[0]
        if value is not None:
            return float(value), "power_summary"
    if r.has("fleet_power_1s", ("level", "energy_j")):
        value = r.one(f"SELECT sum(energy_j) / 3.6e6 FROM fleet_power_1s WHERE date = {ctx.sql_date()} AND level = 'fleet'")[0]
        if value is not None:
            return float(value), "fleet_power_1s"
    return None


def cluster_roles(ctx: Ctx) -> dict[str, str]:
    if not ctx.reader.has("inventory_gpus", ("cluster", "role")):
        return {}
    rows = ctx.reader.rows("SELECT cluster, string_agg(DISTINCT role, '+' ORDER BY role) AS roles FROM inventory_gpus GROUP BY ALL")
    return {row["cluster"]: row["roles"] for row in rows}


PROJECTION_COLS = ("kind", "entity", "members", "gpus", "max_2s_swing_pct", "max_2s_swing_pct_low",
                   "max_2s_swing_pct_high", "published_scale", "published_2s_swing_pct")


def scale_notes(ctx: Ctx, gpus_of: dict, swing: list[dict], roles_of: dict[str, str]) -> list[Note]:
    """Beside the published comparison: how many GPUs this fleet has against the published
    figures' scale, and the swing-at-scale projection's value at that scale (swing_projection)."""
    notes = []
    r = ctx.reader
    for role, (pub_gpus, pub_pct) in (("inference", (2048, 9.0)), ("training", (1024, 37.5))):
        gpus = gpus_of.get(("role", role))
        if not isinstance(gpus, int) or gpus >= pub_gpus:
            continue
        text = (f"{role.capitalize()}: this fleet has {gpus:,} GPUs; the published {pub_pct:g}% comes from a cluster of about "
                f"{pub_gpus:,} — its 2 s swing is not comparable as it stands.")
        if r.has("swing_projection", PROJECTION_COLS):
            proj = r.rows(
                f"""SELECT entity, gpus, max_2s_swing_pct, max_2s_swing_pct_low, max_2s_swing_pct_high
                    FROM {r.day_relation('swing_projection', ctx.date)} WHERE kind = '{role}' AND published_scale ORDER BY entity""")
            if proj:
                parts = ", ".join(f"{p['entity']} {p['max_2s_swing_pct']:.1f}% ({p['max_2s_swing_pct_low']:.1f}–{p['max_2s_swing_pct_high']:.1f}%)"
                                  for p in proj)
                how = ("endpoints added with their bursts shifted, assumed independent" if role == "inference"
                       else "hosts added in step, as a synchronous job runs")
                text += (f" Projected from this day's own series to {round(proj[0]['gpus']):,} GPUs ({how}; max 2 s swing on the 100 ms grid, "
                         f"% of provisioned, median and band of the draws): {parts}; published: up to {pub_pct:g}%. See section 2.")
        notes.append(Note(text, "warn"))
    return notes


def entity_gpus(ctx: Ctx) -> dict[tuple[str, str], int]:
    """GPUs per (level, entity) for the role and cluster rows: the published swings are for thousands."""
    if not ctx.reader.has("inventory_gpus", ("cluster", "role")):
        return {}
    rows = ctx.reader.rows("SELECT 'cluster' AS level, cluster AS entity, count(*) AS n FROM inventory_gpus GROUP BY ALL "
                           "UNION ALL SELECT 'role', role, count(*) FROM inventory_gpus GROUP BY ALL")
    return {(row["level"], row["entity"]): row["n"] for row in rows}


def serving_numbers(ctx: Ctx) -> dict:
    """J per prompt and per output token over every endpoint (token-weighted where energy_per_token
    has the token counts, else the mean of the endpoints), and the share of prefill time whose
    100 ms power is above the GPU's TDP (phase_timeline). Empty where the tables are not built."""
    r = ctx.reader
    out: dict = {}
    if r.has("energy_per_token", ("endpoint", "bucket_kind", "j_per_prompt_token", "j_per_output_token")):
        rel = r.day_relation("energy_per_token", ctx.date)
        if r.has("energy_per_token", ("prompt_tokens", "output_tokens")):
            pp, po = r.one(f"""SELECT sum(j_per_prompt_token * prompt_tokens) / nullif(sum(prompt_tokens) FILTER (j_per_prompt_token IS NOT NULL), 0),
                                      sum(j_per_output_token * output_tokens) / nullif(sum(output_tokens) FILTER (j_per_output_token IS NOT NULL), 0)
                               FROM {rel} WHERE bucket_kind = 'all'""")
            how = "token-weighted over endpoints"
        else:
            pp, po = r.one(f"SELECT avg(j_per_prompt_token), avg(j_per_output_token) FROM {rel} WHERE bucket_kind = 'all'")
            how = "mean of endpoints"
        if pp is not None or po is not None:
            out.update(j_per_prompt_token=num(pp, 4), j_per_output_token=num(po, 4), j_per_token_how=how)
    if r.has("phase_timeline", ("host", "gpu", "ts", "power_w", "phase")) and r.has("inventory_gpus", ("host", "gpu", "tdp_w")):
        share = r.one(f"""SELECT avg((t.power_w > i.tdp_w)::INT) FROM phase_timeline AS t JOIN inventory_gpus AS i USING (host, gpu)
                          WHERE t.date = {ctx.sql_date()} AND t.phase = 'prefill' AND t.power_w IS NOT NULL""")[0]
        if share is not None:
            out["prefill_time_above_tdp_share"] = num(share, 4)
    return out


def build(ctx: Ctx) -> Section:
    s = Section("headline", TITLE)
    r = ctx.reader

    serving = serving_numbers(ctx)
    if serving:
        s.headline.update({k: v for k, v in serving.items() if k != "j_per_token_how"})
        parts = []
        if serving.get("j_per_prompt_token") is not None or serving.get("j_per_output_token") is not None:
            parts.append(f"{serving.get('j_per_prompt_token')} J per prompt token and {serving.get('j_per_output_token')} J per output "
                         f"token ({serving['j_per_token_how']}, `energy_per_token`)")
        if "prefill_time_above_tdp_share" in serving:
            parts.append(f"{100 * serving['prefill_time_above_tdp_share']:.1f} % of prefill time above TDP "
                         "(100 ms power of the prefill slots of `phase_timeline`)")
        s.add(Note("Serving: " + "; ".join(parts) + ".", "info"))

    energy = fleet_energy_kwh(ctx)
    stats = role_stats(ctx)
    if energy is None and stats is None:
        s.not_available("`fleet_power_1s` has no rows for this day (run `wattline run --date " + ctx.date + "`)")
    if energy is not None:
        s.headline["fleet_energy_kwh"] = num(energy[0], 3)
        s.add(Note(f"Fleet energy on {ctx.date}: {energy[0]:,.1f} kWh (from `{energy[1]}`).", "info"))
    if stats is not None:
        rows, source = stats
        s.headline["roles"] = {
            row["role"]: {k: num(row[k], 2) for k in ("mean_w", "max_w", "mean_pct", "max_pct", "energy_kwh", "provisioned_w")} for row in rows
        }
        res = "100 ms" if source == "power_summary" else "1 s"
        peak = f"peak, {res} mean"
        bars = [{"role": row["role"], "stat": stat, "pct": num(row[col], 2)} for row in rows for stat, col in (("day mean", "mean_pct"), (peak, "max_pct"))]
        s.add(
            Chart("headline_roles", charts.role_pct_bars(bars),
                  f"Source: `{source}`: the role's summed power, its mean over the day and its highest {res} mean "
                  f"({'the 100 ms grid of complete slots' if res == '100 ms' else 'seconds where all its GPUs report'})."),
            Table(
                ["role", "day mean (W)", "day mean (% prov.)", f"{peak} (W)", f"{peak} (% prov.)", "energy, day (kWh)", "provisioned (W)"],
                [
                    [
                        row["role"],
                        num(row["mean_w"], 0),
                        num(row["mean_pct"]),
                        num(row["max_w"], 0),
                        num(row["max_pct"]),
                        num(row["energy_kwh"], 2),
                        num(row["provisioned_w"], 0),
                    ]
                    for row in rows
                ],
            ),
        )

    # Training vs inference swings beside the published reference points.
    if r.has("swing_stats", SWING_COLS):
        swing = r.rows(
            f"""SELECT level, entity, max_swing_w, max_swing_pct, p99_swing_w, provisioned_w
                FROM {r.day_relation('swing_stats', ctx.date)}
                WHERE window_s = 2 AND series = 'instant' AND level IN ('role', 'cluster')
                ORDER BY level DESC, entity"""
        )
        steps = r.rows(
            f"""SELECT DISTINCT grid_step_ms FROM {r.day_relation('swing_stats', ctx.date)}
                WHERE window_s = 2 AND series = 'instant' AND level IN ('role', 'cluster')"""
        ) if r.has("swing_stats", (*SWING_COLS, "grid_step_ms")) else []
        grid = grid_words([x["grid_step_ms"] for x in steps])
        step_ms = sorted({x["grid_step_ms"] for x in steps if x["grid_step_ms"]})
        step_label = f"{step_ms[0]} ms" if len(step_ms) == 1 else "100 ms"
        roles_of = cluster_roles(ctx)
        gpus_of = entity_gpus(ctx)
        table = []
        for row in swing:
            role = row["entity"] if row["level"] == "role" else roles_of.get(row["entity"], "?")
            ref = REFERENCE_2S_SWING_PCT.get(role)
            table.append(
                [
                    row["level"],
                    row["entity"],
                    role,
                    gpus_of.get((row["level"], row["entity"]), "?"),
                    f"up to {ref:g}%" if ref else "–",
                    num(row["max_swing_pct"]),
                    num(row["max_swing_w"], 0),
                    num(row["p99_swing_w"], 0),
                    num(row["provisioned_w"], 0),
                ]
            )
        s.headline["max_2s_swing_pct"] = {f"{row['level']}:{row['entity']}": num(row["max_swing_pct"], 2) for row in swing}
        s.headline["reference_2s_swing_pct"] = REFERENCE_2S_SWING_PCT
        s.add(
            Table(
                [
                    "level",
                    "entity",
                    "role",
                    "GPUs",
                    "published (max 2 s swing, % prov.)",
                    f"this fleet: max 2 s swing, {step_label} (% prov.)",
                    f"max 2 s swing, {step_label} (W)",
                    f"p99 2 s swing, {step_label} (W)",
                    "provisioned (W)",
                ],
                table,
                f"Training vs inference: largest power change within any 2 s window of the instantaneous trace {grid} (swing_stats), beside the published "
                "cluster-level reference points (training up to 37.5%, inference up to 9% of provisioned within 2 s), "
                "which were measured on clusters of thousands of GPUs: fewer GPUs smooth less.",
            )
        )
        s.add(*scale_notes(ctx, gpus_of, swing, roles_of))
    else:
        s.not_available(r.missing("swing_stats", SWING_COLS) + ": the training-vs-inference swing table")
    if r.has("training_vs_inference", ("role",)):
        tvi = r.q(f"SELECT * FROM {r.day_relation('training_vs_inference', ctx.date)} ORDER BY role")
        cols = [c for c in tvi.column_names if c != "date"][:12]
        if tvi.num_rows:
            s.add(
                Table(
                    cols,
                    [[num(v, 2) if isinstance(v, float) else v for v in (row[c] for c in cols)] for row in tvi.to_pylist()],
                    "`training_vs_inference` for this day.",
                )
            )

    # Headroom per cluster.
    if r.has("power_headroom", HEADROOM_COLS):
        head = r.rows(
            f"""SELECT entity, provisioned_w, p99_2s_w, p999_2s_w, max_2s_w, headroom_pct, extra_hosts_estimate
                FROM {r.day_relation('power_headroom', ctx.date)} WHERE level = 'cluster' ORDER BY entity"""
        )
        s.headline["headroom_pct"] = {row["entity"]: num(row["headroom_pct"], 2) for row in head}
        bars = [
            {"entity": row["entity"], "stat": stat, "pct": num(100 * (row[col] or 0) / row["provisioned_w"], 2)}
            for row in head[:100]
            if row["provisioned_w"]
            for stat, col in (("p99 2 s", "p99_2s_w"), ("max 2 s", "max_2s_w"))
        ]
        if bars:
            s.add(Chart("headline_headroom", charts.headroom_bars(bars)))
        s.add(
            Table(
                ["cluster", "provisioned (W)", "p99 2 s (W)", "p99.9 2 s (W)", "max 2 s (W)", "headroom (%)", "extra hosts (est.)"],
                [
                    [
                        row["entity"],
                        num(row["provisioned_w"], 0),
                        num(row["p99_2s_w"], 0),
                        num(row["p999_2s_w"], 0),
                        num(row["max_2s_w"], 0),
                        num(row["headroom_pct"]),
                        num(row["extra_hosts_estimate"], 1),
                    ]
                    for row in head
                ],
                "Headroom per cluster (power_headroom): provisioned minus observed 2 s power, and how many more hosts of the same profile fit.",
            ),
            Code("all power domains", f"SELECT * FROM power_headroom WHERE date = DATE '{ctx.date}' ORDER BY headroom_pct"),
        )
    else:
        s.not_available(r.missing("power_headroom", HEADROOM_COLS) + ": headroom per cluster")
    return s
