-- Shared by the phase tables (phase_timeline, request_energy, phase_segments): each request's
-- prefill and decode intervals on the 100 ms grid. Loaded after power_day.sql (day_start(),
-- day_end()) and power_grid.sql (slot_100ms, slot_ts): slots are integers,
-- slot_100ms(ts) = epoch_ns(ts) // 100 000 000.

-- Requests that touch the partition day (arrived that day or the day before and still running).
-- A request is in prefill from prefill_start_ts to first_token_ts and in decode from
-- first_token_ts to end_ts. Without prefill_start_ts it starts at the later of its arrival and
-- the end of the previous prefill on its endpoint (the latest earlier first token; on its own
-- replica where the request names one); without
-- first_token_ts (failed before the first token) the whole request counts as prefill
-- (first_token_logged says which). Token counts not logged read 0 here, for the phases' weights
-- (prompt_tokens_logged / output_tokens_logged say which).
CREATE OR REPLACE VIEW request_phases AS
WITH r AS (
    SELECT
        request_id, endpoint, date AS arrival_date, arrival_ts, prefill_start_ts,
        coalesce(first_token_ts, end_ts) AS first_token_ts, end_ts,
        coalesce(prompt_tokens, 0) AS prompt_tokens, coalesce(output_tokens, 0) AS output_tokens, status,
        first_token_ts IS NOT NULL AS first_token_logged, max_tokens, replica,
        prompt_tokens IS NOT NULL AS prompt_tokens_logged, output_tokens IS NOT NULL AS output_tokens_logged
    FROM requests
    WHERE date BETWEEN getvariable('partition_date')::DATE - 1 AND getvariable('partition_date')::DATE
      AND end_ts IS NOT NULL
),
prev AS (
    SELECT endpoint, first_token_ts,
           lag(first_token_ts) OVER (PARTITION BY endpoint ORDER BY first_token_ts) AS prev_prefill_end
    FROM (SELECT DISTINCT endpoint, first_token_ts FROM r)
),
prev_on_replica AS (  -- the same on the request's own replica, where the log names it (replicas prefill in parallel)
    SELECT endpoint, replica, first_token_ts,
           lag(first_token_ts) OVER (PARTITION BY endpoint, replica ORDER BY first_token_ts) AS prev_prefill_end
    FROM (SELECT DISTINCT endpoint, replica, first_token_ts FROM r WHERE replica IS NOT NULL)
)
SELECT
    r.* EXCLUDE (prefill_start_ts),
    least(
        coalesce(r.prefill_start_ts,
                 greatest(r.arrival_ts, coalesce(CASE WHEN r.replica IS NULL THEN p.prev_prefill_end ELSE pr.prev_prefill_end END,
                                                 r.arrival_ts))),
        r.first_token_ts
    ) AS prefill_start_ts,
    r.prefill_start_ts IS NULL AS prefill_start_estimated
FROM r JOIN prev AS p USING (endpoint, first_token_ts)
LEFT JOIN prev_on_replica AS pr ON pr.endpoint = r.endpoint AND pr.replica = r.replica AND pr.first_token_ts = r.first_token_ts
WHERE r.end_ts >= day_start() AND r.arrival_ts < day_end();

-- One row per request and phase with a positive duration: the interval [a_ns, b_ns), its first
-- and last slot, and its token rate (tokens per ns, spread evenly over the interval). A phase
-- that reports 0 tokens weighs as one token so its slots' energy is still charged.
CREATE OR REPLACE VIEW request_intervals AS
WITH iv AS (
    SELECT request_id, endpoint, 'prefill' AS phase, epoch_ns(prefill_start_ts) AS a_ns, epoch_ns(first_token_ts) AS b_ns,
           greatest(prompt_tokens, 1) AS weight_tokens, prefill_start_estimated AS estimated
    FROM request_phases WHERE first_token_ts > prefill_start_ts
    UNION ALL
    SELECT request_id, endpoint, 'decode', epoch_ns(first_token_ts), epoch_ns(end_ts),
           greatest(output_tokens, 1), false
    FROM request_phases WHERE end_ts > first_token_ts
)
SELECT *, a_ns // 100000000 AS sa, (b_ns - 1) // 100000000 AS sb, weight_tokens / (b_ns - a_ns)::DOUBLE AS rate
FROM iv;

-- Bucket labels of energy_per_token (the "From Words to Watts" axes); a count not logged is 'unknown'.
CREATE OR REPLACE MACRO batch_bucket(n) AS
    CASE WHEN n IS NULL OR n < 1 THEN NULL WHEN n <= 1 THEN '1' WHEN n <= 2 THEN '2' WHEN n <= 4 THEN '3-4'
         WHEN n <= 8 THEN '5-8' WHEN n <= 16 THEN '9-16' WHEN n <= 32 THEN '17-32' WHEN n <= 64 THEN '33-64' ELSE '65+' END;

CREATE OR REPLACE MACRO prompt_len_bucket(n) AS
    CASE WHEN n IS NULL THEN 'unknown' WHEN n < 256 THEN '<256' WHEN n < 1024 THEN '256-1k' WHEN n < 4096 THEN '1k-4k' WHEN n < 16384 THEN '4k-16k' ELSE '16k+' END;

CREATE OR REPLACE MACRO max_tokens_bucket(n) AS
    CASE WHEN n IS NULL THEN 'unknown' WHEN n <= 256 THEN '≤256' WHEN n <= 1024 THEN '257-1024'
         WHEN n <= 4096 THEN '1025-4096' ELSE '4097+' END;

CREATE OR REPLACE MACRO output_len_bucket(n) AS
    CASE WHEN n IS NULL THEN 'unknown' WHEN n < 64 THEN '<64' WHEN n < 256 THEN '64-256' WHEN n < 1024 THEN '256-1k' ELSE '1k+' END;

-- A float sum that does not depend on how the rows were split across threads (exact in DECIMAL),
-- so re-materializing a day gives identical tables. Use CASE instead of FILTER with it.
CREATE OR REPLACE MACRO xsum(x) AS sum(x::DECIMAL(38, 12))::DOUBLE;
