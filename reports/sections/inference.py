"""4. Inference: one endpoint's power over 5 minutes with prefill/decode shading, phase shares of
time and energy, J per prompt and output token by endpoint and batch-size bucket."""

from __future__ import annotations

import datetime as dt
import re

from reports import charts
from reports.data import quote
from reports.sections.base import Chart, Code, Ctx, Note, Section, Table, num

TITLE = "Inference: phases and energy per token"
WINDOW_S = 300
MIN_BUCKET_REQUESTS = 5  # fewer requests with power than this: the bucket is left out of the chart
SEGMENT_COLS = ("date", "endpoint", "host", "gpu", "start_ts", "end_ts", "phase", "source")
EPT_COLS = ("endpoint", "bucket_kind", "bucket", "j_per_prompt_token", "j_per_output_token", "j_per_request",
            "prefill_mean_w", "decode_mean_w", "prefill_time_share", "prefill_energy_share", "tdp_exceedances")
SOURCE_RANK_SQL = """CASE WHEN source::VARCHAR = 'nvml-buffer' THEN 1 WHEN source::VARCHAR IN ('nvml-field', 'simulated') THEN 2
                          WHEN source::VARCHAR = 'nvidia-smi' THEN 3 ELSE 5 END"""


def _ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def batch_points(batch: list[dict]) -> tuple[list[dict], int]:
    """Chart points of J per prompt/output token per batch-size bucket, and how many were left out:
    a bucket without energy (NULL or 0 J) or with fewer than ``MIN_BUCKET_REQUESTS`` requests with
    power says nothing about that batch size (one request cut off at the day's end reads 0 J)."""
    points, left_out = [], 0
    for x in batch:
        n = x.get("requests_with_power")
        for token, col in (("prompt", "j_per_prompt_token"), ("output", "j_per_output_token")):
            j = x[col]
            if j is None or j <= 0 or (n is not None and n < MIN_BUCKET_REQUESTS):
                left_out += 1
                continue
            points.append({"endpoint": x["endpoint"], "bucket": x["bucket"], "order": _bucket_order(x["bucket"]), "token": token, "j": num(j, 4)})
    return points, left_out


def pick_endpoint(ctx: Ctx) -> str | None:
    r = ctx.reader
    held = ctx.endpoint_gpus()
    if held is None:
        return None
    endpoints = [row["endpoint"] for row in r.rows(f"SELECT DISTINCT endpoint FROM ({held}) ORDER BY 1")]
    if not endpoints:
        return None
    if r.has("requests", ("endpoint", "date")):
        busiest = r.rows(
            f"""SELECT endpoint, count(*) AS n FROM requests WHERE date = {ctx.sql_date()}
                AND endpoint IN (SELECT endpoint FROM ({held})) GROUP BY ALL ORDER BY n DESC, endpoint LIMIT 1"""
        )
        if busiest:
            return busiest[0]["endpoint"]
    return endpoints[0]


def endpoint_power(ctx: Ctx, endpoint: str) -> tuple[list[dict], str, int, int] | None:
    """The endpoint's summed power over the 5 minutes around its peak second: 100 ms from the raw
    trace when every GPU has samples, else the 1 s means."""
    r = ctx.reader
    held = ctx.endpoint_gpus()
    if held is None or not r.has("power_1s", ("host", "gpu", "ts", "mean_w")):
        return None
    ep = quote(endpoint)
    # the endpoint's GPUs, each while it held it: a sample counts where its instant lies in the holding
    mine = f"(SELECT host, gpu, from_ns, to_ns FROM ({held}) WHERE endpoint = {ep})"
    at = "p.host = i.host AND p.gpu = i.gpu AND epoch_ns(p.ts) >= i.from_ns AND epoch_ns(p.ts) < i.to_ns"
    bounds = r.one(
        f"""WITH s AS (SELECT p.ts, sum(p.mean_w) AS w FROM power_1s p JOIN {mine} i ON {at}
                       WHERE p.date = {ctx.sql_date()} GROUP BY p.ts)
            SELECT epoch_ms((arg_max(ts, w))::TIMESTAMPTZ), epoch_ms((min(ts))::TIMESTAMPTZ), epoch_ms((max(ts))::TIMESTAMPTZ) FROM s"""
    )
    if bounds[0] is None:
        return None
    peak, first, last = bounds
    lo = max(first, peak - WINDOW_S * 500)
    hi = min(last + 1000, lo + WINDOW_S * 1000)
    lo = max(first, hi - WINDOW_S * 1000)
    gpus = r.rows(f"SELECT DISTINCT host, gpu FROM {mine} WHERE from_ns < {hi * 1_000_000} AND to_ns > {lo * 1_000_000} "
                  "ORDER BY host, gpu")
    hosts = ", ".join(sorted({quote(g["host"]) for g in gpus}))
    span = f"ts >= make_timestamptz({lo * 1000}) AND ts < make_timestamptz({hi * 1000})"
    fine = []
    if r.has("power", ("host", "gpu", "ts", "power_w", "source", "date")):
        fine = r.rows(
            f"""WITH raw AS (SELECT p.host, p.gpu, p.ts, p.power_w, {SOURCE_RANK_SQL} AS rk FROM power p
                             JOIN {mine} i ON {at}
                             WHERE p.date = {ctx.sql_date()} AND p.host IN ({hosts}) AND p.{span} AND p.power_w IS NOT NULL),
                     best AS (SELECT host, gpu, min(rk) AS rk FROM raw GROUP BY ALL),
                     b AS (SELECT host, gpu, time_bucket(INTERVAL 100 MILLISECOND, ts) AS t, avg(power_w) AS w
                           FROM raw JOIN best USING (host, gpu, rk) GROUP BY ALL)
                SELECT epoch_ms((t)::TIMESTAMPTZ) AS t, round(sum(w), 1) AS w FROM b GROUP BY t HAVING count(*) = {len(gpus)} ORDER BY t"""
        )
    if len(fine) >= WINDOW_S * 5:  # at least half of the 100 ms slots
        return fine, "100 ms, summed over its GPUs", lo, hi
    coarse = r.rows(
        f"""SELECT epoch_ms((p.ts)::TIMESTAMPTZ) AS t, round(sum(p.mean_w), 1) AS w FROM power_1s p JOIN {mine} i ON {at}
            WHERE p.date = {ctx.sql_date()} AND p.{span} GROUP BY p.ts ORDER BY p.ts"""
    )
    return coarse, "1 s means, summed over its GPUs", lo, hi


def segments(ctx: Ctx, endpoint: str, lo: int, hi: int) -> tuple[list[dict], str]:
    r = ctx.reader
    rel = r.day_relation("phase_segments", ctx.date)
    ep = quote(endpoint)
    span = f"end_ts > make_timestamptz({lo * 1000}) AND start_ts < make_timestamptz({hi * 1000})"
    pick = r.rows(
        f"""SELECT host, gpu, source, (source = 'requests') AS from_requests, count(*) AS n FROM {rel}
            WHERE endpoint = {ep} AND {span}
            GROUP BY host, gpu, source ORDER BY from_requests DESC, host NULLS LAST, gpu NULLS LAST LIMIT 1"""
    )
    if not pick:
        return [], ""
    p = pick[0]
    host = "host IS NULL" if p["host"] is None else f"host = {quote(p['host'])}"
    gpu = "gpu IS NULL" if p["gpu"] is None else f"gpu = {int(p['gpu'])}"
    rows = r.rows(
        f"""SELECT epoch_ms((greatest(start_ts, make_timestamptz({lo * 1000})))::TIMESTAMPTZ) AS start,
                   epoch_ms((least(end_ts, make_timestamptz({hi * 1000})))::TIMESTAMPTZ) AS "end", phase
            FROM {rel} WHERE endpoint = {ep} AND {host} AND {gpu} AND source = {quote(p['source'])}
              AND phase IN ('prefill', 'decode') AND {span} ORDER BY start_ts LIMIT 2000"""
    )
    where = f"{p['host']}/{p['gpu']}" if p["host"] is not None else "endpoint"
    # requests: boundaries at the logged events' own timestamps (phase_intervals, exact); power: the
    # power-only detector on the GPU's own samples
    how = "exact, at the request events' own timestamps" if p["source"] == "requests" else "power-only, at the power samples' own instants"
    return rows, f"phases of {where} (source: {p['source']}; {how})"


def _bucket_order(bucket) -> float:
    m = re.search(r"-?\d+(\.\d+)?", str(bucket))
    return float(m.group()) if m else float("inf")


def build(ctx: Ctx) -> Section:
    s = Section("inference", TITLE)
    r = ctx.reader
    endpoint = pick_endpoint(ctx)
    if endpoint is None:
        s.add(Note("No inference endpoint in inventory.yaml: nothing to show here.", "missing"))
    else:
        power = endpoint_power(ctx, endpoint)
        if power is None:
            s.add(Note(f"No power for endpoint {endpoint} on {ctx.date}.", "missing"))
        else:
            rows, resolution, lo, hi = power
            segs, seg_note = [], ""
            if r.has("phase_segments", SEGMENT_COLS):
                segs, seg_note = segments(ctx, endpoint, lo, hi)
            s.add(
                Chart(
                    "inference_window",
                    charts.endpoint_window(rows, segs, endpoint, resolution),
                    f"The 5 minutes around {endpoint}'s highest 1 s power. "
                    + (f"Shading: {seg_note} from `phase_segments`." if segs else "No phase shading: see below."),
                )
            )
            s.headline["inference_window"] = {"endpoint": endpoint, "start": _ts(lo), "end": _ts(hi)}
            if not r.has("phase_segments", SEGMENT_COLS):
                s.not_available(r.missing("phase_segments", SEGMENT_COLS) + ": prefill/decode shading")
            elif not segs:
                s.add(Note(f"`phase_segments` has no segments of {endpoint} in this window.", "info"))
            s.add(
                Code(
                    "phase segments in this window",
                    f"SELECT host, gpu, start_ts, end_ts, phase, source, mean_w, peak_w, energy_j FROM phase_segments "
                    f"WHERE date = DATE '{ctx.date}' AND endpoint = '{endpoint}' AND end_ts > TIMESTAMPTZ '{_ts(lo)}+00' "
                    f"AND start_ts < TIMESTAMPTZ '{_ts(hi)}+00' ORDER BY host, gpu, start_ts",
                )
            )
    if r.has("energy_per_token", EPT_COLS):
        rel = r.day_relation("energy_per_token", ctx.date)
        overall = r.rows(f"SELECT * FROM {rel} WHERE bucket_kind = 'all' ORDER BY endpoint")
        shares = [
            {"endpoint": x["endpoint"], "share_of": kind, "share": num(x[col], 4)}
            for x in overall
            for kind, col in (("time", "prefill_time_share"), ("energy", "prefill_energy_share"))
            if x[col] is not None
        ]
        if shares:
            s.add(Chart("phase_shares", charts.phase_shares(shares), "From `energy_per_token` (bucket_kind = 'all')."))
        s.add(
            Table(
                [
                    "endpoint",
                    "J / prompt token",
                    "J / output token",
                    "J / request",
                    "prefill mean (W)",
                    "decode mean (W)",
                    "prefill time share (%)",
                    "prefill energy share (%)",
                    "prefill peaks > TDP (per hour)",
                ],
                [
                    [
                        x["endpoint"],
                        num(x["j_per_prompt_token"], 3),
                        num(x["j_per_output_token"], 3),
                        num(x["j_per_request"], 1),
                        num(x["prefill_mean_w"], 0),
                        num(x["decode_mean_w"], 0),
                        num(100 * x["prefill_time_share"] if x["prefill_time_share"] is not None else None),
                        num(100 * x["prefill_energy_share"] if x["prefill_energy_share"] is not None else None),
                        x["tdp_exceedances"],
                    ]
                    for x in overall
                ],
            )
        )
        s.headline["energy_per_token"] = {
            x["endpoint"]: {"j_per_prompt_token": num(x["j_per_prompt_token"], 4), "j_per_output_token": num(x["j_per_output_token"], 4)} for x in overall
        }
        counted = r.has("energy_per_token", ("requests_with_power",))
        batch = r.rows(
            f"SELECT endpoint, bucket::VARCHAR AS bucket, j_per_prompt_token, j_per_output_token, "
            f"{'requests_with_power' if counted else 'NULL'} AS requests_with_power "
            f"FROM {rel} WHERE bucket_kind = 'batch_size' ORDER BY endpoint, bucket"
        )
        points, left_out = batch_points(batch)
        why = (f" {left_out} bucket point(s) left out: no energy (missing or 0 J per token) or fewer than {MIN_BUCKET_REQUESTS} requests with power."
               if left_out else "")
        if points:
            s.add(Chart("j_per_token_batch", charts.j_per_token(points[: charts.MAX_POINTS]),
                        f"From `energy_per_token` (bucket_kind = 'batch_size').{why}"))
            s.headline["j_per_token_batch_points_left_out"] = left_out
        elif batch:
            s.add(Note(f"No batch-size bucket of `energy_per_token` to chart for this day:{why}", "info"))
        else:
            s.add(Note("`energy_per_token` has no batch-size buckets for this day.", "info"))
    else:
        s.not_available(r.missing("energy_per_token", EPT_COLS) + ": phase shares and J per token")
    return s
