-- energy_per_token: per endpoint and day, overall (bucket_kind 'all') and by batch_size, prompt_len,
-- output_len, hour (UTC), gpu_model and power_limit (the endpoint's enforced limit, W).
-- Request metrics (j_per_prompt_token = Σ prefill_j / Σ prompt tokens, j_per_output_token,
-- j_per_request) come from request_energy's requests that had power (requests_with_power of
-- requests; NULL, never 0, where none had), each request in one bucket: its mean concurrency over
-- its life (batch_size: requests in flight averaged over its exact intervals in phase_intervals),
-- its lengths, its arrival hour. Power metrics come from the exact
-- intervals of phase_intervals, each in its own bucket (batch_size = requests active in it, its hour;
-- intervals are cut at whole hours):
-- prefill_mean_w / decode_mean_w (per GPU), prefill_time_share and prefill_energy_share (of the
-- busy = prefill + decode slots), idle_j, and tdp_exceedances = prefill segments whose peak
-- exceeded TDP per GPU-hour. Prompt/output-length rows carry request metrics only. Endpoints
-- without a request log get power metrics from the power-only labels (source = 'power').
WITH meta AS (
    SELECT i.endpoint, coalesce(any_value(i.gpu_model), 'unknown') AS gpu_model,
           round(coalesce(median(pl.limit_w), max(i.tdp_w)))::INTEGER || ' W' AS power_limit
    FROM (  -- the endpoint's GPUs: those it held this day (gpu_assignments)
        SELECT DISTINCT a.name AS endpoint, g.host, g.gpu, g.gpu_model, g.tdp_w
        FROM gpu_assignments AS a JOIN inventory_gpus AS g USING (host, gpu)
        WHERE a.kind = 'endpoint' AND a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start())
    ) AS i
    LEFT JOIN (
        SELECT host, gpu, median(power_limit_w) AS limit_w FROM power
        WHERE date = getvariable('partition_date') AND power_limit_w IS NOT NULL GROUP BY ALL
    ) AS pl USING (host, gpu)
    GROUP BY ALL
),
slots AS (  -- compact: GPU time per endpoint, hour, concurrency and label, in 100 ms GPU-slot units (n):
            -- logged endpoints from their exact intervals (phase_intervals: n = duration / 100 ms × GPUs,
            -- sum_w = energy / 0.1 s, so sum_w / n is the mean per-GPU power), the others from the
            -- power-only labels of the 100 ms grid
    SELECT endpoint, 'requests' AS source, hour(start_ts) AS hour, n_prefill + n_decode AS batch, phase AS label,
           xsum((end_ns - start_ns) / 1e8 * gpus) AS n, xsum(energy_j * 10) AS sum_w, coalesce(xsum(energy_j), 0) AS energy_j
    FROM phase_intervals
    WHERE date = getvariable('partition_date')
    GROUP BY endpoint, hour(start_ts), n_prefill + n_decode, phase
    UNION ALL
    SELECT endpoint, 'power' AS source, hour(ts) AS hour, n_prefill + n_decode AS batch, power_phase AS label,
           count(power_w) AS n, xsum(power_w) AS sum_w, coalesce(xsum(energy_j), 0) AS energy_j
    FROM phase_timeline
    WHERE date = getvariable('partition_date') AND phase IS NULL
      AND endpoint NOT IN (SELECT endpoint FROM phase_intervals WHERE date = getvariable('partition_date'))
    GROUP BY endpoint, hour(ts), n_prefill + n_decode, power_phase
),
slot_buckets AS (
    SELECT s.*, b.kind, b.bucket
    FROM slots AS s JOIN meta USING (endpoint)
    CROSS JOIN LATERAL (VALUES ('all', 'all'), ('batch_size', batch_bucket(s.batch)), ('hour', lpad(s.hour::VARCHAR, 2, '0')),
                               ('gpu_model', meta.gpu_model), ('power_limit', meta.power_limit)) AS b(kind, bucket)
    WHERE b.bucket IS NOT NULL AND NOT (b.kind = 'batch_size' AND s.source = 'power')
),
power_metrics AS (
    SELECT endpoint, kind, bucket, any_value(source) AS source,
           xsum(CASE WHEN label = 'prefill' THEN sum_w END) / nullif(xsum(CASE WHEN label = 'prefill' THEN n END), 0) AS prefill_mean_w,
           xsum(CASE WHEN label = 'decode' THEN sum_w END) / nullif(xsum(CASE WHEN label = 'decode' THEN n END), 0) AS decode_mean_w,
           xsum(CASE WHEN label = 'prefill' THEN n END) / nullif(xsum(CASE WHEN label IN ('prefill', 'decode') THEN n END), 0) AS prefill_time_share,
           xsum(CASE WHEN label = 'prefill' THEN energy_j END) / nullif(xsum(CASE WHEN label IN ('prefill', 'decode') THEN energy_j END), 0) AS prefill_energy_share,
           coalesce(xsum(CASE WHEN label = 'idle' THEN energy_j END), 0) AS idle_j,
           xsum(energy_j) AS energy_j,
           xsum(n) / 36000.0 AS gpu_hours
    FROM slot_buckets GROUP BY ALL
),
peaks AS (  -- prefill segments above TDP, from the request log where there is one
    SELECT s.endpoint, hour(s.start_ts) AS hour, count(*) AS n
    FROM phase_segments AS s
    WHERE s.date = getvariable('partition_date') AND s.phase = 'prefill' AND s.above_tdp
      AND s.source = CASE WHEN s.endpoint IN (SELECT endpoint FROM request_phases) THEN 'requests' ELSE 'power' END
    GROUP BY ALL
),
peak_buckets AS (
    SELECT p.endpoint, b.kind, b.bucket, sum(p.n) AS n
    FROM peaks AS p JOIN meta USING (endpoint)
    CROSS JOIN LATERAL (VALUES ('all', 'all'), ('hour', lpad(p.hour::VARCHAR, 2, '0')), ('gpu_model', meta.gpu_model),
                               ('power_limit', meta.power_limit)) AS b(kind, bucket)
    GROUP BY ALL
),
ep_busy AS (  -- the endpoint's requests in flight integrated over time (request-ns), running over its exact
              -- intervals and read at their ends (a request's start and end are interval boundaries)
    SELECT endpoint, end_ns,
           sum((n_prefill + n_decode) * (end_ns - start_ns)::HUGEINT) OVER (PARTITION BY endpoint ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS cum_n
    FROM phase_intervals WHERE date = getvariable('partition_date')
),
req AS (  -- mean batch = requests in flight averaged over the request's life (inside the endpoint's span)
    SELECT e.*, r.arrival_ts,
           ((coalesce(hi.cum_n, 0) - coalesce(lo.cum_n, 0)) / nullif(hi.end_ns - coalesce(lo.end_ns, s.lo), 0))::DOUBLE AS mean_batch
    FROM request_energy AS e
    JOIN (SELECT request_id, endpoint, arrival_ts, epoch_ns(prefill_start_ts) AS a_ns, epoch_ns(end_ts) AS b_ns
          FROM request_phases) AS r USING (request_id, endpoint)
    LEFT JOIN (SELECT endpoint, min(start_ns) AS lo FROM phase_intervals WHERE date = getvariable('partition_date') GROUP BY ALL) AS s
        USING (endpoint)
    ASOF LEFT JOIN ep_busy AS hi ON hi.endpoint = r.endpoint AND r.b_ns >= hi.end_ns
    ASOF LEFT JOIN ep_busy AS lo ON lo.endpoint = r.endpoint AND r.a_ns >= lo.end_ns
    WHERE e.date = getvariable('partition_date')
),
req_buckets AS (
    SELECT q.*, b.kind, b.bucket
    FROM req AS q JOIN meta USING (endpoint)
    CROSS JOIN LATERAL (VALUES ('all', 'all'), ('batch_size', batch_bucket(greatest(round(q.mean_batch), 1))),
                               ('prompt_len', prompt_len_bucket(q.prompt_tokens)), ('output_len', output_len_bucket(q.output_tokens)),
                               ('hour', lpad(hour(q.arrival_ts)::VARCHAR, 2, '0')), ('gpu_model', meta.gpu_model),
                               ('power_limit', meta.power_limit)) AS b(kind, bucket)
),
request_metrics AS (
    SELECT endpoint, kind, bucket, count(*) AS requests,
           -- over the requests that had power (request_energy.power_coverage > 0): NULL, not 0, where none had
           xsum(prefill_j) / nullif(sum(CASE WHEN prefill_j IS NOT NULL THEN prompt_tokens END), 0) AS j_per_prompt_token,
           xsum(decode_j) / nullif(sum(CASE WHEN decode_j IS NOT NULL THEN output_tokens END), 0) AS j_per_output_token,
           xsum(total_j) / nullif(count(total_j), 0) AS j_per_request,
           count(total_j) AS requests_with_power,
           sum(prompt_tokens) AS prompt_tokens, sum(output_tokens) AS output_tokens
    FROM req_buckets GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    endpoint,
    kind AS bucket_kind,
    bucket,
    r.j_per_prompt_token,
    r.j_per_output_token,
    r.j_per_request,
    p.prefill_mean_w,
    p.decode_mean_w,
    p.prefill_time_share,
    p.prefill_energy_share,
    CASE WHEN p.gpu_hours > 0 AND kind <> 'batch_size' THEN coalesce(k.n, 0) / p.gpu_hours END AS tdp_exceedances,
    CASE WHEN kind <> 'batch_size' THEN p.gpu_hours END AS covered_gpu_h,
    coalesce(r.requests, 0) AS requests,
    coalesce(r.requests_with_power, 0) AS requests_with_power,
    r.prompt_tokens,
    r.output_tokens,
    p.idle_j,
    p.energy_j,
    coalesce(p.source, 'requests') AS source
FROM power_metrics AS p
FULL JOIN request_metrics AS r USING (endpoint, kind, bucket)
LEFT JOIN peak_buckets AS k USING (endpoint, kind, bucket)
ORDER BY endpoint, CASE bucket_kind WHEN 'all' THEN 0 ELSE 1 END, bucket_kind, bucket
