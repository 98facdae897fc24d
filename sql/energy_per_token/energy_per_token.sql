-- energy_per_token: per endpoint and day, overall (bucket_kind 'all') and by batch_size (per replica),
-- prompt_len, output_len, max_tokens, hour (UTC), gpu_model, model, gpus_per_replica and power_limit
-- (the enforced limit in force, W).
-- Request metrics (j_per_prompt_token = Σ prefill_j / Σ prompt tokens, j_per_output_token,
-- j_per_request) come from request_energy's requests that had power (requests_with_power of
-- requests; NULL, never 0, where none had), each request in one bucket: its mean concurrency over
-- its life (batch_size: requests in flight averaged over its exact intervals in phase_intervals,
-- divided by the endpoint's replicas; where every request of the endpoint names its replica, the
-- requests in flight on its own replica instead, exactly), its lengths, its arrival hour, the limit
-- in force at its prefill start. Latency (ttft/queue/tpot/e2e p50/p90/p99, ms) over the bucket's requests with
-- status ok, from request_energy's per-request figures. Power metrics come from the exact
-- intervals of phase_intervals, each in its own bucket (batch_size = requests active in it ÷
-- replicas, rounded up, or where replicas are logged one piece per replica with requests active
-- on it: its own count, 1/replicas of the interval's GPU time and energy, its share of the output
-- tokens by requests in flight; its hour; the limit in force (intervals are cut at whole hours and where the limit changes, _iv)):
-- prefill_mean_w / decode_mean_w (per GPU), prefill_time_share and prefill_energy_share (of the
-- busy = prefill + decode slots), idle_j, output_tokens_per_s_per_gpu (output tokens of the busy
-- intervals ÷ their GPU-seconds), and tdp_exceedances = prefill segments whose peak exceeded TDP per
-- GPU-hour. Prompt/output-length and max_tokens rows carry request metrics only. Endpoints without a
-- request log get power metrics from the power-only labels (source = 'power').
-- The enforced limit: per endpoint and minute the median over its GPUs of each GPU's median
-- power_limit_w in its power rows that minute (NVML collector, nvidia-smi, DCGM), carried forward
-- (before the day's first such minute, that one); without any: the inventory's power_limit_w, else
-- TDP (power_limit_source says which).
CREATE OR REPLACE TEMP TABLE _limits AS  -- each GPU's reported limit per minute: gpu_limit_minutes (sql/views)
SELECT a.name AS endpoint, m.from_ns, median(m.limit_w) AS limit_w
FROM gpu_limit_minutes AS m JOIN gpu_assignments AS a  -- the GPUs the endpoint held during that minute
    ON a.host = m.host AND a.gpu = m.gpu AND a.kind = 'endpoint' AND a.from_ns < m.from_ns + 60000000000 AND a.to_ns > m.from_ns
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _ep AS  -- per endpoint: what it serves, how it is split, its fallback limit
WITH held AS (  -- the endpoint's GPUs: those it held this day (held_gpus)
    SELECT DISTINCT name AS endpoint, host, gpu, gpu_model, power_limit_w, tdp_w FROM held_gpus('endpoint')
),
g AS (
    SELECT endpoint, coalesce(any_value(gpu_model), 'unknown') AS gpu_model, count(*) AS gpus,
           median(power_limit_w) AS inventory_limit_w, max(tdp_w) AS tdp_w
    FROM held GROUP BY ALL
),
e AS (
    SELECT endpoint, any_value(model) AS model, any_value(params_b) AS params_b, any_value(active_params_b) AS active_params_b,
           any_value(precision) AS precision, any_value(tp) AS tp, any_value(pp) AS pp,
           any_value(gpus_per_replica) AS gpus_per_replica, any_value(engine) AS engine
    FROM inventory_endpoints GROUP BY ALL
)
SELECT g.*, e.* EXCLUDE (endpoint),
       greatest(coalesce(g.gpus // e.gpus_per_replica, 1), 1) AS replicas,
       (SELECT l.limit_w FROM _limits AS l WHERE l.endpoint = g.endpoint ORDER BY l.from_ns LIMIT 1) AS first_limit_w
FROM g LEFT JOIN e USING (endpoint);

CREATE OR REPLACE TEMP TABLE _rl AS  -- per logged endpoint: do its requests name their replica?
SELECT endpoint, bool_and(replica IS NOT NULL) AS exact, count(DISTINCT replica) AS replicas_logged
FROM request_phases GROUP BY ALL;

-- per endpoint and logged replica: requests in flight (prefill start to end) from each event time t
-- to the next (k), and their integral up to t (cum_n, request-ns), for the endpoints whose every
-- request names its replica
CREATE OR REPLACE TEMP TABLE _replica_busy AS
WITH ev AS (
    SELECT endpoint, replica, t, sum(d) AS d
    FROM (SELECT endpoint, replica, epoch_ns(prefill_start_ts) AS t, 1 AS d FROM request_phases
          UNION ALL
          SELECT endpoint, replica, epoch_ns(end_ts), -1 FROM request_phases)
    WHERE endpoint IN (SELECT endpoint FROM _rl WHERE exact)
    GROUP BY ALL
),
run AS (
    SELECT endpoint, replica, t,
           sum(d) OVER (PARTITION BY endpoint, replica ORDER BY t ROWS UNBOUNDED PRECEDING) AS k,
           lead(t) OVER (PARTITION BY endpoint, replica ORDER BY t) AS t_next
    FROM ev
)
SELECT endpoint, replica, t, k,
       coalesce(sum(k * (t_next - t)::HUGEINT) OVER (PARTITION BY endpoint, replica ORDER BY t
                                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS cum_n
FROM run;

-- the instants the endpoint's enforced limit changes (a minute start of gpu_limit_minutes whose
-- limit differs from the minute before it)
CREATE OR REPLACE TEMP TABLE _limit_changes AS
SELECT endpoint, from_ns AS t
FROM (SELECT endpoint, from_ns, limit_w, lag(limit_w) OVER (PARTITION BY endpoint ORDER BY from_ns) AS prev FROM _limits)
WHERE prev IS NOT NULL AND limit_w <> prev;

-- the day's exact intervals, each cut where the limit in force changes inside it (so every part
-- goes to its own limit's bucket: its share of the interval's energy from energy_curve, of its
-- time and of its tokens by duration, the rates being constant inside an interval), with the
-- output tokens that were logged: phase_intervals weighs the decode of a request that reported
-- 0 output tokens (or none) as one token, so that its energy is charged; here a reported 0 counts
-- none, and an interval in which a request without a logged count is in flight has unknown (NULL)
-- output tokens, its time left out of output_tokens_per_s_per_gpu
CREATE OR REPLACE TEMP TABLE _iv AS
WITH iv AS (
    SELECT endpoint, start_ns, end_ns, start_ts, phase, n_prefill, n_decode, gpus, energy_j, output_tokens
    FROM phase_intervals WHERE date = getvariable('partition_date')
),
no_tokens AS (  -- decodes that reported 0 output tokens: phase_intervals spread one token over each
    SELECT endpoint, epoch_ns(first_token_ts) AS a_ns, epoch_ns(end_ts) AS b_ns
    FROM request_phases WHERE output_tokens = 0 AND output_tokens_logged AND end_ts > first_token_ts
),
unknown AS (  -- intervals in which a request whose output tokens are not logged is in flight
    SELECT DISTINCT i.endpoint, i.start_ns
    FROM iv AS i JOIN request_phases AS z
        ON z.endpoint = i.endpoint AND NOT z.output_tokens_logged
       AND epoch_ns(z.prefill_start_ts) < i.end_ns AND epoch_ns(z.end_ts) > i.start_ns
),
not_counted AS (
    SELECT i.endpoint, i.start_ns,
           sum((least(i.end_ns, z.b_ns) - greatest(i.start_ns, z.a_ns)) / (z.b_ns - z.a_ns)::DOUBLE) AS tokens
    FROM iv AS i JOIN no_tokens AS z ON z.endpoint = i.endpoint AND z.a_ns < i.end_ns AND z.b_ns > i.start_ns
    GROUP BY ALL
),
counted AS (
    SELECT i.* EXCLUDE (output_tokens),
           CASE WHEN u.start_ns IS NOT NULL THEN NULL
                WHEN c.tokens IS NULL THEN i.output_tokens ELSE greatest(i.output_tokens - c.tokens, 0) END AS output_tokens
    FROM iv AS i LEFT JOIN not_counted AS c USING (endpoint, start_ns)
    LEFT JOIN unknown AS u USING (endpoint, start_ns)
),
cuts AS (
    SELECT i.endpoint, i.start_ns, list_sort(list(c.t)) AS ts
    FROM iv AS i JOIN _limit_changes AS c ON c.endpoint = i.endpoint AND c.t > i.start_ns AND c.t < i.end_ns
    GROUP BY ALL
),
pieces AS (
    SELECT endpoint, start_ns, unnest([start_ns] || ts) AS a_ns, unnest(ts || [end_ns]) AS b_ns, end_ns
    FROM cuts JOIN iv USING (endpoint, start_ns)
),
energy_at AS (  -- the endpoint's cumulative energy (its GPUs, each while it held it) at each cut's instants
    SELECT p.endpoint, p.t,
           sum(energy_at_ns(a.host, a.gpu, greatest(least(p.t, a.to_ns), a.from_ns))) AS e_j
    FROM (SELECT DISTINCT endpoint, unnest([a_ns, b_ns]) AS t FROM pieces) AS p
    JOIN gpu_assignments AS a
        ON a.name = p.endpoint AND a.kind = 'endpoint' AND a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start())
    GROUP BY ALL
),
split AS (
    SELECT p.endpoint, p.a_ns AS start_ns, p.b_ns AS end_ns, make_timestamptz(p.a_ns // 1000) AS start_ts,
           c.phase, c.n_prefill, c.n_decode, c.gpus,
           c.energy_j * coalesce((eb.e_j - ea.e_j) / nullif(e1.e_j - e0.e_j, 0),
                                 (p.b_ns - p.a_ns) / (c.end_ns - c.start_ns)::DOUBLE) AS energy_j,
           c.output_tokens * (p.b_ns - p.a_ns) / (c.end_ns - c.start_ns)::DOUBLE AS output_tokens
    FROM pieces AS p
    JOIN counted AS c USING (endpoint, start_ns)
    LEFT JOIN energy_at AS ea ON ea.endpoint = p.endpoint AND ea.t = p.a_ns
    LEFT JOIN energy_at AS eb ON eb.endpoint = p.endpoint AND eb.t = p.b_ns
    LEFT JOIN energy_at AS e0 ON e0.endpoint = p.endpoint AND e0.t = c.start_ns
    LEFT JOIN energy_at AS e1 ON e1.endpoint = p.endpoint AND e1.t = c.end_ns
)
SELECT counted.* FROM counted ANTI JOIN cuts USING (endpoint, start_ns)
UNION ALL BY NAME
SELECT * FROM split;

WITH slots AS (  -- compact: GPU time per endpoint, hour, concurrency per replica, limit and label, in 100 ms
                 -- GPU-slot units (n): logged endpoints from their exact intervals (phase_intervals: n =
                 -- duration / 100 ms × GPUs, sum_w = energy / 0.1 s, so sum_w / n is the mean per-GPU power), the
                 -- others from the power-only labels of the 100 ms grid
    SELECT i.endpoint, 'requests' AS source, hour(i.start_ts) AS hour,
           CASE WHEN NOT rl.exact THEN ceil((i.n_prefill + i.n_decode) / ep.replicas) END AS batch, FALSE AS batch_only,
           i.phase AS label, coalesce(l.limit_w, ep.first_limit_w, ep.inventory_limit_w, ep.tdp_w) AS limit_w,
           CASE WHEN coalesce(l.limit_w, ep.first_limit_w) IS NOT NULL THEN 'power'
                WHEN ep.inventory_limit_w IS NOT NULL THEN 'inventory' ELSE 'tdp' END AS limit_source,
           xsum((i.end_ns - i.start_ns) / 1e8 * i.gpus) AS n, xsum(i.energy_j * 10) AS sum_w, xsum(i.energy_j) AS energy_j,
           xsum(i.output_tokens) AS output_tokens,
           xsum(CASE WHEN i.output_tokens IS NOT NULL THEN (i.end_ns - i.start_ns) / 1e8 * i.gpus END) AS n_counted
    FROM _iv AS i
    JOIN _ep AS ep USING (endpoint)
    JOIN _rl AS rl USING (endpoint)
    ASOF LEFT JOIN _limits AS l ON l.endpoint = i.endpoint AND i.start_ns >= l.from_ns
    GROUP BY ALL
    UNION ALL  -- the batch_size pieces of the endpoints whose requests name their replica: per interval and
               -- replica with requests in flight, its own count, 1/replicas of the interval (the power samples
               -- do not say which GPUs a replica id ran on), its share of the output tokens by requests in flight
    SELECT i.endpoint, 'requests' AS source, hour(i.start_ts) AS hour, b.k AS batch, TRUE AS batch_only, i.phase AS label,
           coalesce(l.limit_w, ep.first_limit_w, ep.inventory_limit_w, ep.tdp_w) AS limit_w,
           CASE WHEN coalesce(l.limit_w, ep.first_limit_w) IS NOT NULL THEN 'power'
                WHEN ep.inventory_limit_w IS NOT NULL THEN 'inventory' ELSE 'tdp' END AS limit_source,
           xsum((i.end_ns - i.start_ns) / 1e8 * i.gpus / rn.n) AS n, xsum(i.energy_j * 10 / rn.n) AS sum_w,
           xsum(i.energy_j / rn.n) AS energy_j,
           xsum(i.output_tokens * b.k / nullif(i.n_prefill + i.n_decode, 0)) AS output_tokens,
           xsum(CASE WHEN i.output_tokens IS NOT NULL THEN (i.end_ns - i.start_ns) / 1e8 * i.gpus / rn.n END) AS n_counted
    FROM _iv AS i
    JOIN _ep AS ep USING (endpoint)
    JOIN (SELECT endpoint, replica FROM _replica_busy GROUP BY ALL) AS r USING (endpoint)
    JOIN (SELECT r.endpoint, CASE WHEN e.gpus_per_replica IS NOT NULL THEN e.replicas ELSE r.replicas_logged END AS n
          FROM _rl AS r JOIN _ep AS e USING (endpoint) WHERE r.exact) AS rn USING (endpoint)
    ASOF JOIN _replica_busy AS b ON b.endpoint = i.endpoint AND b.replica = r.replica AND i.start_ns >= b.t
    ASOF LEFT JOIN _limits AS l ON l.endpoint = i.endpoint AND i.start_ns >= l.from_ns
    WHERE b.k > 0
    GROUP BY ALL
    UNION ALL
    SELECT t.endpoint, 'power' AS source, hour(t.ts) AS hour, t.n_prefill + t.n_decode AS batch, FALSE AS batch_only,
           t.power_phase AS label,
           coalesce(l.limit_w, ep.first_limit_w, ep.inventory_limit_w, ep.tdp_w) AS limit_w,
           CASE WHEN coalesce(l.limit_w, ep.first_limit_w) IS NOT NULL THEN 'power'
                WHEN ep.inventory_limit_w IS NOT NULL THEN 'inventory' ELSE 'tdp' END AS limit_source,
           count(t.power_w) AS n, xsum(t.power_w) AS sum_w, coalesce(xsum(t.energy_j), 0) AS energy_j, NULL AS output_tokens,
           NULL AS n_counted
    FROM (SELECT *, epoch_ns(ts) AS t_ns FROM phase_timeline
          WHERE date = getvariable('partition_date') AND phase IS NULL
            AND endpoint NOT IN (SELECT endpoint FROM phase_intervals WHERE date = getvariable('partition_date'))) AS t
    JOIN _ep AS ep USING (endpoint)
    ASOF LEFT JOIN _limits AS l ON l.endpoint = t.endpoint AND t.t_ns >= l.from_ns
    GROUP BY ALL
),
slot_buckets AS (
    SELECT s.*, b.kind, b.bucket
    FROM slots AS s JOIN _ep AS ep USING (endpoint)
    CROSS JOIN LATERAL (VALUES ('all', 'all'), ('batch_size', batch_bucket(s.batch)), ('hour', lpad(s.hour::VARCHAR, 2, '0')),
                               ('gpu_model', ep.gpu_model), ('model', coalesce(ep.model, 'unknown')),
                               ('gpus_per_replica', coalesce(ep.gpus_per_replica::VARCHAR, 'unknown')),
                               ('power_limit', round(s.limit_w)::INTEGER || ' W')) AS b(kind, bucket)
    WHERE b.bucket IS NOT NULL AND NOT (b.kind = 'batch_size' AND s.source = 'power') AND (b.kind = 'batch_size' OR NOT s.batch_only)
),
power_metrics AS (
    SELECT endpoint, kind, bucket, any_value(source) AS source,
           xsum(CASE WHEN label = 'prefill' THEN sum_w END) / nullif(xsum(CASE WHEN label = 'prefill' THEN n END), 0) AS prefill_mean_w,
           xsum(CASE WHEN label = 'decode' THEN sum_w END) / nullif(xsum(CASE WHEN label = 'decode' THEN n END), 0) AS decode_mean_w,
           xsum(CASE WHEN label = 'prefill' THEN n END) / nullif(xsum(CASE WHEN label IN ('prefill', 'decode') THEN n END), 0) AS prefill_time_share,
           xsum(CASE WHEN label = 'prefill' THEN energy_j END) / nullif(xsum(CASE WHEN label IN ('prefill', 'decode') THEN energy_j END), 0) AS prefill_energy_share,
           coalesce(xsum(CASE WHEN label = 'idle' THEN energy_j END), 0) AS idle_j,
           xsum(energy_j) AS energy_j,
           xsum(n) / 36000.0 AS gpu_hours,
           xsum(CASE WHEN label IN ('prefill', 'decode') THEN output_tokens END)
               / nullif(xsum(CASE WHEN label IN ('prefill', 'decode') THEN n_counted END) / 10.0, 0) AS output_tokens_per_s_per_gpu,
           min(limit_w) AS limit_lo, max(limit_w) AS limit_hi, list(DISTINCT limit_source) AS limit_sources
    FROM slot_buckets GROUP BY ALL
),
peaks AS (  -- prefill segments above TDP, from the request log where there is one
    SELECT s.endpoint, hour(s.start_ts) AS hour, coalesce(l.limit_w, ep.first_limit_w, ep.inventory_limit_w, ep.tdp_w) AS limit_w,
           count(*) AS n
    FROM (SELECT *, epoch_ns(start_ts) AS t_ns FROM phase_segments
          WHERE date = getvariable('partition_date') AND phase = 'prefill' AND above_tdp
            AND source = CASE WHEN endpoint IN (SELECT endpoint FROM request_phases) THEN 'requests' ELSE 'power' END) AS s
    JOIN _ep AS ep USING (endpoint)
    ASOF LEFT JOIN _limits AS l ON l.endpoint = s.endpoint AND s.t_ns >= l.from_ns
    GROUP BY ALL
),
peak_buckets AS (
    SELECT p.endpoint, b.kind, b.bucket, sum(p.n) AS n
    FROM peaks AS p JOIN _ep AS ep USING (endpoint)
    CROSS JOIN LATERAL (VALUES ('all', 'all'), ('hour', lpad(p.hour::VARCHAR, 2, '0')), ('gpu_model', ep.gpu_model),
                               ('model', coalesce(ep.model, 'unknown')), ('gpus_per_replica', coalesce(ep.gpus_per_replica::VARCHAR, 'unknown')),
                               ('power_limit', round(p.limit_w)::INTEGER || ' W')) AS b(kind, bucket)
    GROUP BY ALL
),
ep_busy AS (  -- the endpoint's requests in flight integrated over time (request-ns), running over its exact
              -- intervals and read at their ends (a request's start and end are interval boundaries)
    SELECT endpoint, end_ns,
           sum((n_prefill + n_decode) * (end_ns - start_ns)::HUGEINT) OVER (PARTITION BY endpoint ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS cum_n
    FROM phase_intervals WHERE date = getvariable('partition_date')
),
req_batch AS (  -- per logged request: mean batch = requests in flight averaged over its life (inside the
                -- endpoint's span); replica_batch: on its own replica (the events of _replica_busy: exact, from
                -- the request log); the limit reported in force at its prefill start. Only these columns go
                -- through the ASOF joins (each sorts what it carries), request_energy's join them after
    SELECT r.request_id, r.endpoint, r.a_ns,
           ((coalesce(hi.cum_n, 0) - coalesce(lo.cum_n, 0)) / nullif(hi.end_ns - coalesce(lo.end_ns, s.lo), 0))::DOUBLE AS mean_batch,
           ((rb.cum_n - ra.cum_n) / nullif(r.b_ns - r.a_ns, 0))::DOUBLE AS replica_batch,
           l.limit_w AS reported_limit_w
    FROM (SELECT request_id, endpoint, replica, epoch_ns(prefill_start_ts) AS a_ns, epoch_ns(end_ts) AS b_ns
          FROM request_phases) AS r
    LEFT JOIN _replica_busy AS ra ON ra.endpoint = r.endpoint AND ra.replica = r.replica AND ra.t = r.a_ns
    LEFT JOIN _replica_busy AS rb ON rb.endpoint = r.endpoint AND rb.replica = r.replica AND rb.t = r.b_ns
    LEFT JOIN (SELECT endpoint, min(start_ns) AS lo FROM phase_intervals WHERE date = getvariable('partition_date') GROUP BY ALL) AS s
        ON s.endpoint = r.endpoint
    ASOF LEFT JOIN ep_busy AS hi ON hi.endpoint = r.endpoint AND r.b_ns >= hi.end_ns
    ASOF LEFT JOIN ep_busy AS lo ON lo.endpoint = r.endpoint AND r.a_ns >= lo.end_ns
    ASOF LEFT JOIN _limits AS l ON l.endpoint = r.endpoint AND r.a_ns >= l.from_ns
),
req_limited AS (  -- the request's figures, its batch and the limit in force at its prefill start
    SELECT e.*, b.a_ns, b.mean_batch, b.replica_batch,
           ep.replicas, coalesce(rl.exact, FALSE) AS replica_exact, ep.gpu_model AS ep_gpu_model, ep.model AS ep_model, ep.gpus_per_replica AS ep_gpus_per_replica,
           coalesce(b.reported_limit_w, ep.first_limit_w, ep.inventory_limit_w, ep.tdp_w) AS limit_w,
           CASE WHEN coalesce(b.reported_limit_w, ep.first_limit_w) IS NOT NULL THEN 'power'
                WHEN ep.inventory_limit_w IS NOT NULL THEN 'inventory' ELSE 'tdp' END AS limit_source
    FROM request_energy AS e
    JOIN req_batch AS b USING (request_id, endpoint)
    JOIN _ep AS ep USING (endpoint)
    LEFT JOIN _rl AS rl USING (endpoint)
    WHERE e.date = getvariable('partition_date')
),
req_buckets AS (  -- each request once per bucket kind: a list unnested row by row (a lateral VALUES
                  -- would join every request back to its buckets, the step's largest intermediate)
    SELECT * EXCLUDE (b), b.kind, b.bucket
    FROM (SELECT q.*,
                 unnest([{'kind': 'all', 'bucket': 'all'},
                         {'kind': 'batch_size', 'bucket': batch_bucket(greatest(round(CASE WHEN q.replica_exact THEN q.replica_batch
                                                                                  ELSE q.mean_batch / q.replicas END), 1))},
                         {'kind': 'prompt_len', 'bucket': prompt_len_bucket(q.prompt_tokens)},
                         {'kind': 'output_len', 'bucket': output_len_bucket(q.output_tokens)},
                         {'kind': 'max_tokens', 'bucket': max_tokens_bucket(q.max_tokens)},
                         {'kind': 'hour', 'bucket': lpad(hour(q.arrival_ts)::VARCHAR, 2, '0')},
                         {'kind': 'gpu_model', 'bucket': q.ep_gpu_model},
                         {'kind': 'model', 'bucket': coalesce(q.ep_model, 'unknown')},
                         {'kind': 'gpus_per_replica', 'bucket': coalesce(q.ep_gpus_per_replica::VARCHAR, 'unknown')},
                         {'kind': 'power_limit', 'bucket': round(q.limit_w)::INTEGER || ' W'}]) AS b
          FROM req_limited AS q)
),
request_metrics AS (
    SELECT endpoint, kind, bucket, count(*) AS requests,
           -- over the requests that had power (request_energy.power_coverage > 0): NULL, not 0, where none had
           -- and whose token count is logged (a request without one adds neither joules nor tokens)
           xsum(CASE WHEN prompt_tokens IS NOT NULL THEN prefill_j END)
               / nullif(sum(CASE WHEN prefill_j IS NOT NULL THEN prompt_tokens END), 0) AS j_per_prompt_token,
           xsum(CASE WHEN output_tokens IS NOT NULL THEN decode_j END)
               / nullif(sum(CASE WHEN decode_j IS NOT NULL THEN output_tokens END), 0) AS j_per_output_token,
           xsum(total_j) / nullif(count(total_j), 0) AS j_per_request,
           count(total_j) AS requests_with_power,
           sum(prompt_tokens) AS prompt_tokens, sum(output_tokens) AS output_tokens,
           -- latency over the requests that completed (status ok), each figure where its events are logged
           quantile_cont(CASE WHEN status = 'ok' THEN ttft_ms END, [0.5, 0.9, 0.99]) AS ttft_q,
           quantile_cont(CASE WHEN status = 'ok' THEN queue_ms END, [0.5, 0.9, 0.99]) AS queue_q,
           quantile_cont(CASE WHEN status = 'ok' THEN tpot_ms END, [0.5, 0.9, 0.99]) AS tpot_q,
           quantile_cont(CASE WHEN status = 'ok' THEN e2e_ms END, [0.5, 0.9, 0.99]) AS e2e_q,
           count(CASE WHEN status = 'ok' THEN queue_ms END) AS requests_with_queue_time,
           min(limit_w) AS limit_lo, max(limit_w) AS limit_hi, list(DISTINCT limit_source) AS limit_sources
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
    coalesce(p.source, 'requests') AS source,
    -- the endpoint's keys (inventory), on every row
    ep.model,
    ep.params_b,
    ep.active_params_b,
    ep.precision,
    ep.tp,
    ep.pp,
    ep.gpus_per_replica,
    ep.replicas,
    coalesce(rl.replicas_logged, 0) AS replicas_logged,
    ep.gpu_model,
    ep.engine,
    -- the one enforced limit behind the row's requests and intervals (NULL when more than one was in force)
    CASE WHEN least(p.limit_lo, r.limit_lo) = greatest(p.limit_hi, r.limit_hi) THEN least(p.limit_lo, r.limit_lo) END AS power_limit_w,
    array_to_string(list_sort(list_distinct(flatten([coalesce(p.limit_sources, []), coalesce(r.limit_sources, [])]))), '+') AS power_limit_source,
    -- exact where every request of the endpoint names its replica; else an estimate on a multi-replica
    -- endpoint (by the inventory, or by the replica ids that some of its requests name)
    CASE WHEN kind = 'batch_size' THEN NOT coalesce(rl.exact, FALSE) AND (ep.replicas > 1 OR coalesce(rl.replicas_logged, 0) > 1) END
        AS batch_per_replica_estimated,
    r.ttft_q[1] AS ttft_p50_ms, r.ttft_q[2] AS ttft_p90_ms, r.ttft_q[3] AS ttft_p99_ms,
    r.queue_q[1] AS queue_p50_ms, r.queue_q[2] AS queue_p90_ms, r.queue_q[3] AS queue_p99_ms,
    r.tpot_q[1] AS tpot_p50_ms, r.tpot_q[2] AS tpot_p90_ms, r.tpot_q[3] AS tpot_p99_ms,
    r.e2e_q[1] AS e2e_p50_ms, r.e2e_q[2] AS e2e_p90_ms, r.e2e_q[3] AS e2e_p99_ms,
    coalesce(r.requests_with_queue_time, 0) AS requests_with_queue_time,
    p.output_tokens_per_s_per_gpu
FROM power_metrics AS p
FULL JOIN request_metrics AS r USING (endpoint, kind, bucket)
LEFT JOIN peak_buckets AS k USING (endpoint, kind, bucket)
LEFT JOIN _ep AS ep USING (endpoint)
LEFT JOIN _rl AS rl USING (endpoint)
ORDER BY endpoint, CASE bucket_kind WHEN 'all' THEN 0 ELSE 1 END, bucket_kind, bucket
