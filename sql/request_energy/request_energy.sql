-- request_energy: per request that arrived on the partition day, the energy charged to its prefill
-- and decode (J) and per token (J/token). Attribution rule (docs/phases.md), in event time: each
-- elementary interval of phase_intervals (between consecutive request events; energy from the
-- energy curve, all GPUs of the endpoint) goes to the phase of its label, and within it to the
-- requests in that phase in proportion to the tokens each processes in it (its token rate). With
-- u(k) = interval energy / the phase's token rate (J per token/s), a request's charge is its token
-- rate times the sum of u over its interval's elementary intervals: a running sum of u read at the
-- interval's two ends (both are events, so there are no partial edges). Idle intervals are not
-- charged (energy_per_token.idle_j). Requests that arrived the day before and ran past midnight are
-- charged their share of this day but listed in their arrival day's partition only (with this day's
-- share missing there: documented). `_charged` holds every request that touched the day, so the
-- conservation check (checks/energy_conservation.sql) sees all the energy charged this day.
-- power_coverage: the share of the request's GPU-time (its interval inside the day × its endpoint's
-- GPUs, each while the endpoint held it: gpu_assignments) that has power samples (macro power_runs('endpoint'),
-- sql/views/power_runs.sql: spans where a GPU's samples are at most 2 s apart). Where it is 0 (no
-- sample of any of its GPUs while it ran, or an endpoint without GPUs in the inventory) the
-- energies are NULL, never 0: nothing was measured. Below 1 they are the measured part only
-- (checks/power_coverage.sql WARNs).
-- Latency (ms, from the request's own logged events; NULL where an event is not logged):
-- ttft_ms = first token − arrival, queue_ms = prefill start − arrival (only where the prefill start
-- is logged, not inferred), tpot_ms = (end − first token) / (output tokens − 1) for ≥ 2 output
-- tokens, e2e_ms = end − arrival.
CREATE OR REPLACE TEMP TABLE _coverage AS
WITH req AS (
    SELECT request_id, endpoint,
           greatest(epoch_ns(prefill_start_ts), epoch_ns(day_start())) AS a_ns,
           -- an instantaneous request counts as 1 ns: covered if a span holds its instant
           greatest(least(epoch_ns(end_ts), epoch_ns(day_end())), greatest(epoch_ns(prefill_start_ts), epoch_ns(day_start())) + 1) AS b_ns
    FROM request_phases
),
held AS (  -- the GPU-time the request's endpoint held GPUs while it ran (all its GPUs, each while it was its)
    SELECT r.request_id, r.endpoint, sum(least(r.b_ns, a.to_ns) - greatest(r.a_ns, a.from_ns)) AS held_ns
    FROM req AS r JOIN gpu_assignments AS a ON a.kind = 'endpoint' AND a.name = r.endpoint AND a.from_ns < r.b_ns AND a.to_ns > r.a_ns
    GROUP BY ALL
),
covered AS (
    SELECT r.request_id, r.endpoint, sum(least(r.b_ns, c.hi_ns) - greatest(r.a_ns, c.lo_ns)) AS gpu_ns
    FROM req AS r JOIN power_runs('endpoint') AS c ON c.name = r.endpoint AND c.lo_ns < r.b_ns AND c.hi_ns > r.a_ns
    GROUP BY ALL
)
SELECT r.request_id, r.endpoint,
       -- least() skips NULLs: without this CASE a request whose endpoint held no GPU read 1.0
       CASE WHEN h.held_ns > 0 THEN least(coalesce(c.gpu_ns, 0) / h.held_ns::DOUBLE, 1.0) ELSE 0.0 END AS power_coverage,
       coalesce(h.held_ns, 0) AS held_ns  -- for the coverage checks: 0 where its endpoint held no GPU while it ran
FROM req AS r LEFT JOIN held AS h USING (request_id, endpoint) LEFT JOIN covered AS c USING (request_id, endpoint);

CREATE OR REPLACE TEMP TABLE _charged AS
WITH span AS (
    SELECT endpoint, min(start_ns) AS lo, max(end_ns) AS hi
    FROM phase_intervals WHERE date = getvariable('partition_date') GROUP BY ALL
),
price AS (
    SELECT endpoint, end_ns,
           sum(CASE WHEN phase = 'prefill' THEN energy_j / nullif(prompt_tokens_per_s, 0) ELSE 0 END) OVER w AS cu_pre,
           sum(CASE WHEN phase = 'decode' THEN energy_j / nullif(output_tokens_per_s, 0) ELSE 0 END) OVER w AS cu_dec
    FROM phase_intervals
    WHERE date = getvariable('partition_date')
    WINDOW w AS (PARTITION BY endpoint ORDER BY start_ns ROWS UNBOUNDED PRECEDING)
),
iv AS (
    SELECT iv.request_id, iv.endpoint, iv.phase, iv.rate * 1e9 AS rate_per_s,
           greatest(iv.a_ns, s.lo) AS a_ns, least(iv.b_ns, s.hi) AS b_ns
    FROM request_intervals AS iv JOIN span AS s USING (endpoint)
    WHERE least(iv.b_ns, s.hi) > greatest(iv.a_ns, s.lo)
),
charged AS (
    SELECT iv.request_id, iv.endpoint, iv.phase,
           iv.rate_per_s * CASE WHEN iv.phase = 'prefill' THEN coalesce(b.cu_pre, 0) - coalesce(a.cu_pre, 0)
                                ELSE coalesce(b.cu_dec, 0) - coalesce(a.cu_dec, 0) END AS energy_j
    FROM iv
    -- both ends are interval boundaries: the running sum up to the interval that ends there (none at the span's start)
    LEFT JOIN price AS a ON iv.endpoint = a.endpoint AND iv.a_ns = a.end_ns
    LEFT JOIN price AS b ON iv.endpoint = b.endpoint AND iv.b_ns = b.end_ns
),
per_request AS (
    SELECT request_id, endpoint,
           coalesce(sum(energy_j) FILTER (WHERE phase = 'prefill'), 0) AS prefill_j,
           coalesce(sum(energy_j) FILTER (WHERE phase = 'decode'), 0) AS decode_j
    FROM charged GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    r.request_id,
    r.endpoint,
    CASE WHEN v.power_coverage > 0 THEN coalesce(c.prefill_j, 0) END AS prefill_j,
    CASE WHEN v.power_coverage > 0 THEN coalesce(c.decode_j, 0) END AS decode_j,
    CASE WHEN v.power_coverage > 0 THEN coalesce(c.prefill_j, 0) + coalesce(c.decode_j, 0) END AS total_j,
    CASE WHEN v.power_coverage > 0 AND r.prompt_tokens_logged THEN coalesce(c.prefill_j, 0) / nullif(r.prompt_tokens, 0) END AS j_per_prompt_token,
    CASE WHEN v.power_coverage > 0 AND r.output_tokens_logged THEN coalesce(c.decode_j, 0) / nullif(r.output_tokens, 0) END AS j_per_output_token,
    r.prefill_start_estimated,
    CASE WHEN r.prompt_tokens_logged THEN r.prompt_tokens END AS prompt_tokens,  -- NULL, not 0, where the log has none
    CASE WHEN r.output_tokens_logged THEN r.output_tokens END AS output_tokens,
    r.arrival_ts,
    r.status,
    v.power_coverage,
    r.max_tokens,
    CASE WHEN r.first_token_logged THEN (epoch_ns(r.first_token_ts) - epoch_ns(r.arrival_ts)) / 1e6 END AS ttft_ms,
    CASE WHEN NOT r.prefill_start_estimated THEN (epoch_ns(r.prefill_start_ts) - epoch_ns(r.arrival_ts)) / 1e6 END AS queue_ms,
    CASE WHEN r.first_token_logged AND r.output_tokens_logged AND r.output_tokens >= 2
         THEN (epoch_ns(r.end_ts) - epoch_ns(r.first_token_ts)) / 1e6 / (r.output_tokens - 1) END AS tpot_ms,
    (epoch_ns(r.end_ts) - epoch_ns(r.arrival_ts)) / 1e6 AS e2e_ms
FROM request_phases AS r
LEFT JOIN per_request AS c USING (request_id, endpoint)
LEFT JOIN _coverage AS v USING (request_id, endpoint)
ORDER BY r.endpoint, r.arrival_ts, r.request_id;


-- the partition: the day's arrivals
SELECT * FROM _charged WHERE arrival_ts >= day_start() ORDER BY endpoint, arrival_ts, request_id;
