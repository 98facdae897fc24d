-- phase_intervals: the exact phase timeline of every endpoint with a request log, in event time.
-- An endpoint's day is cut at every request event (prefill start, first token, end; and at each
-- whole UTC hour, for the hour buckets) between the first and the last sample of its GPUs; each
-- elementary interval [start, end) carries the requests in prefill / decode in it, its label by the
-- rule of docs/phases.md (prefill if any request is in prefill, else decode if any is in decode,
-- else idle), the endpoint's tokens processed in it (each request's tokens spread evenly over its
-- phase interval) and its energy, summed over the endpoint's GPUs, from energy_curve (E(end) −
-- E(start), exact for piecewise-linear power).
-- The sweep is a running sum over the events (+1 / −1 and ± token rate at each interval's ends):
-- linear in requests, no grid. Everything is in integer ns; *_ts columns are the same at µs.

-- the endpoint's GPUs, each over the time it held it this day (held_gpus)
CREATE OR REPLACE TEMP TABLE _pi_gpus AS
SELECT name AS endpoint, host, gpu, from_ns, to_ns FROM held_gpus('endpoint');

-- each GPU's holding inside its samples of the day (a GPU held by one endpoint in the morning and
-- another in the afternoon is one window of each)
CREATE OR REPLACE TEMP TABLE _pi_windows AS
WITH per_gpu AS (  -- one group per GPU first: the join then sees a row per GPU, not per sample
    SELECT host, gpu, min(first_t_ns) AS lo, max(last_t_ns) AS hi FROM energy_curve WHERE date = getvariable('partition_date') GROUP BY host, gpu
)
SELECT g.endpoint, g.host, g.gpu, g.from_ns, g.to_ns, greatest(c.lo, g.from_ns) AS lo, least(c.hi, g.to_ns) AS hi
FROM per_gpu AS c JOIN _pi_gpus AS g USING (host, gpu)
WHERE g.endpoint IN (SELECT endpoint FROM request_phases) AND least(c.hi, g.to_ns) > greatest(c.lo, g.from_ns);

-- each logged endpoint's span: first to last sample of its GPUs this day while they were its
CREATE OR REPLACE TEMP TABLE _pi_span AS
SELECT endpoint, min(lo) AS lo, max(hi) AS hi, count(*) AS gpus FROM _pi_windows GROUP BY endpoint;

-- the day's request phase intervals clipped to the span (a request of the day before still running
-- at midnight keeps its rate, so it gets this day's share). Rates are summed as DECIMAL (tokens per
-- ns to 1e-30): exact sums, so the result does not depend on the order in which DuckDB's threads add
-- them (DOUBLE sums differed in the last bit from one run to the next).
CREATE OR REPLACE TEMP TABLE _pi_requests AS
SELECT iv.request_id, iv.endpoint, iv.phase = 'prefill' AS pre, iv.rate::DECIMAL(38, 30) AS rate, iv.estimated,
       greatest(iv.a_ns, s.lo) AS a_ns, least(iv.b_ns, s.hi) AS b_ns
FROM request_intervals AS iv JOIN _pi_span AS s USING (endpoint)
WHERE least(iv.b_ns, s.hi) > greatest(iv.a_ns, s.lo);

CREATE OR REPLACE TEMP TABLE _pi AS
WITH ev AS (
    SELECT endpoint, a_ns AS t, CASE WHEN pre THEN 1 ELSE 0 END AS dn_pre, CASE WHEN pre THEN 0 ELSE 1 END AS dn_dec,
           estimated::INT AS dest, CASE WHEN pre THEN rate ELSE 0 END AS dr_pre, CASE WHEN pre THEN 0 ELSE rate END AS dr_dec
    FROM _pi_requests
    UNION ALL
    SELECT endpoint, b_ns, CASE WHEN pre THEN -1 ELSE 0 END, CASE WHEN pre THEN 0 ELSE -1 END,
           -estimated::INT, CASE WHEN pre THEN -rate ELSE 0 END, CASE WHEN pre THEN 0 ELSE -rate END
    FROM _pi_requests
    UNION ALL  -- the span's ends and the whole hours inside it
    SELECT endpoint, unnest(list_distinct([lo, hi] || range((lo // 3600000000000 + 1) * 3600000000000, hi, 3600000000000))),
           0, 0, 0, 0.0, 0.0
    FROM _pi_span
),
gpu_ev AS (  -- GPUs joining and leaving the endpoint inside its span (a GPU held all day: the span's ends)
    SELECT w.endpoint, greatest(w.from_ns, s.lo) AS t, 1 AS dg FROM _pi_windows AS w JOIN _pi_span AS s USING (endpoint)
    UNION ALL
    SELECT w.endpoint, least(w.to_ns, s.hi), -1 FROM _pi_windows AS w JOIN _pi_span AS s USING (endpoint)
),
all_ev AS (
    SELECT endpoint, t, dn_pre, dn_dec, dest, dr_pre, dr_dec, 0 AS dg FROM ev
    UNION ALL
    SELECT endpoint, t, 0, 0, 0, 0.0, 0.0, dg FROM gpu_ev
),
at_t AS (
    SELECT endpoint, t, sum(dn_pre) AS dn_pre, sum(dn_dec) AS dn_dec, sum(dest) AS dest,
           sum(dr_pre) AS dr_pre, sum(dr_dec) AS dr_dec, sum(dg) AS dg
    FROM all_ev GROUP BY endpoint, t
),
state AS (
    SELECT endpoint, t AS start_ns, lead(t) OVER w AS end_ns,
           sum(dn_pre) OVER c AS n_prefill, sum(dn_dec) OVER c AS n_decode, sum(dest) OVER c AS n_estimated,
           sum(dr_pre) OVER c AS rate_pre, sum(dr_dec) OVER c AS rate_dec, sum(dg) OVER c AS gpus
    FROM at_t
    WINDOW w AS (PARTITION BY endpoint ORDER BY t), c AS (w ROWS UNBOUNDED PRECEDING)
)
SELECT endpoint, start_ns, end_ns, n_prefill::INTEGER AS n_prefill, n_decode::INTEGER AS n_decode,
       n_estimated > 0 AS prefill_estimated,
       CASE WHEN n_prefill > 0 THEN rate_pre::DOUBLE ELSE 0 END AS rate_pre,  -- token rates (tokens per ns); exact 0 when nobody is in the phase
       CASE WHEN n_decode > 0 THEN rate_dec::DOUBLE ELSE 0 END AS rate_dec,
       CASE WHEN n_prefill > 0 THEN 'prefill' WHEN n_decode > 0 THEN 'decode' ELSE 'idle' END AS phase,
       gpus::BIGINT AS gpus
FROM state WHERE end_ns IS NOT NULL;

-- the endpoint's cumulative energy (all its GPUs, each while it held it) at every interval boundary:
-- temp table _pi_energy (endpoint, t, e_j), built between these statements and the query by the
-- asset's write hook (`intervals`, pipeline/assets/inference_phases.py: one sorted search per GPU on
-- its curve rebuilt from its raw samples: pipeline/phases/curve.py). By hand: energy_at_ns(host, gpu,
-- clamp(t, from_ns, to_ns)) summed over the endpoint's windows (_pi_windows) at each distinct
-- start_ns / end_ns of _pi. An interval where it held no GPU has NULL energy: nothing measured.

SELECT
    getvariable('partition_date') AS date,
    p.endpoint,
    make_timestamptz(p.start_ns // 1000) AS start_ts,
    make_timestamptz(p.end_ns // 1000) AS end_ts,
    p.start_ns,
    p.end_ns,
    p.phase,
    p.n_prefill,
    p.n_decode,
    p.prefill_estimated,
    p.rate_pre * (p.end_ns - p.start_ns) AS prompt_tokens,
    p.rate_dec * (p.end_ns - p.start_ns) AS output_tokens,
    CASE WHEN p.gpus > 0 THEN b.e_j - a.e_j END AS energy_j,
    p.gpus,
    p.rate_pre * 1e9 AS prompt_tokens_per_s,
    p.rate_dec * 1e9 AS output_tokens_per_s
FROM _pi AS p
JOIN _pi_energy AS a ON a.endpoint = p.endpoint AND a.t = p.start_ns
JOIN _pi_energy AS b ON b.endpoint = p.endpoint AND b.t = p.end_ns
ORDER BY p.endpoint, p.start_ns
