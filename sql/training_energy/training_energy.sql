-- training_energy: per training job and day, one row per kind of gap that interrupts its steps
-- (comm_wait, checkpoint, eval, …; the job-level columns repeat on each row), from job_events
-- and, for each event and each of the job's GPUs on its host while the job held it (gpu_assignments), the energy E(end) − E(start) from
-- energy_curve (trapezoid between samples, linear inside a sample interval: exact at the
-- events' own timestamps; a GPU without samples that day adds neither energy nor time):
--   steps              distinct step numbers of the `step` events that end in the day (a step
--                      across midnight counts on the day it ends; its energy is split at midnight)
--   median_step_s      median iteration time: one step's start to the next step's start, per host
--   j_per_step         energy of the job's GPUs over all its events (steps and gaps) ÷ steps (J)
--   j_per_token        the same energy ÷ the tokens of the step events ending in the day (hosts log their share)
--   step_mean_w        mean power per GPU during steps; gap_mean_w during all gap kinds (W)
--   gap_energy_share   share of the job's event energy / time spent in gaps
--   kind_mean_w        mean power per GPU during this row's gap kind (W)
--   boundary_drop_*    drop of the job's summed power when this kind begins: mean over the
--                      0.5 s before minus the 0.5 s after, summed over the job's hosts for the
--                      same step; median and max over the day's boundaries (W)
--   power_coverage     share of the job's event GPU-time (each event × each of the job's GPUs on its
--                      host while the job held it) that had power samples (macro power_runs('job'),
--                      sql/views/power_runs.sql); where it is 0 the energies and powers are NULL,
--                      never 0 (nothing was measured); below 1 they come from the GPUs and times
--                      with samples (checks/power_coverage.sql WARNs)
-- Jobs without events that day are labelled from power alone (source = 'power'): the job's
-- summed power is split at the midpoint of its p10 and p90 into above (step) and below (gap)
-- runs; each fall below is a boundary of kind 'power_drop'; tokens are unknown. The boundary
-- drops and the power-only labelling stay on the 100 ms grid (power_100ms).
-- a job's GPUs are those it held at each instant (gpu_assignments: the inventory, job_events, files)
CREATE OR REPLACE TEMP TABLE _job_held AS
SELECT name AS job, host, gpu, from_ns, to_ns FROM gpu_assignments
WHERE kind = 'job' AND from_ns < epoch_ns(day_end()) AND to_ns > epoch_ns(day_start());

CREATE OR REPLACE TEMP TABLE _job_slots AS
SELECT i.job, g.host, slot_100ms(g.ts) AS slot, sum(g.power_w) AS w, count(*) AS gpus
FROM power_100ms AS g
JOIN _job_held AS i ON i.host = g.host AND i.gpu = g.gpu AND epoch_ns(g.ts) >= i.from_ns AND epoch_ns(g.ts) < i.to_ns
WHERE g.date = getvariable('partition_date')
GROUP BY ALL;

-- the day's events and the earlier days' events still running after midnight (job_events_earlier:
-- a file goes by the day its event starts; pipeline/warehouse.py reads $WATTLINE_JOB_EVENTS_LOOKBACK_DAYS
-- back), of the hosts this scope holds jobs on
CREATE OR REPLACE TEMP TABLE _events AS
SELECT
    job, host, step, kind, tokens, start_ts, end_ts,
    slot_100ms(start_ts) AS s0, slot_100ms(end_ts) AS s1
FROM (
    SELECT job, host, step, kind, tokens, start_ts, end_ts FROM job_events WHERE date = getvariable('partition_date')
    UNION ALL
    SELECT job, host, step, kind, tokens, start_ts, end_ts FROM job_events_earlier
    WHERE end_ts > day_start() AND host IN (SELECT host FROM _job_held)
)
WHERE end_ts > start_ts;

-- Each event × each of the job's GPUs on that host that has samples that day, clipped to the day
-- and to the time the job held the GPU.
CREATE OR REPLACE TEMP TABLE _event_gpus AS
SELECT * FROM (
    SELECT e.job, e.host, i.gpu, e.kind,
           greatest(epoch_ns(e.start_ts), epoch_ns(day_start()), i.from_ns) AS a_ns,
           least(epoch_ns(e.end_ts), epoch_ns(day_end()), i.to_ns) AS b_ns
    FROM _events AS e
    JOIN _job_held AS i ON i.job = e.job AND i.host = e.host
    SEMI JOIN (SELECT DISTINCT host, gpu FROM energy_curve WHERE date = getvariable('partition_date')) AS c
        ON c.host = i.host AND c.gpu = i.gpu
    WHERE e.end_ts > day_start() AND e.start_ts < day_end()
) WHERE b_ns > a_ns;

-- E(t) at every event boundary (macro energy_at_instants, sql/views/power_energy.sql), 0 before the
-- GPU's first sample.
CREATE OR REPLACE TEMP TABLE _event_instants AS
SELECT host, gpu, a_ns AS t FROM _event_gpus UNION ALL SELECT host, gpu, b_ns FROM _event_gpus;

CREATE OR REPLACE TEMP TABLE _event_energy_at AS
SELECT host, gpu, t, e_j AS e FROM energy_at_instants('_event_instants');

-- each event × each of the job's GPUs on its host (samples or not), clipped to the day: the GPU-time
-- that had samples
CREATE OR REPLACE TEMP TABLE _job_coverage AS
WITH eg AS (
    SELECT * FROM (
        SELECT e.job, e.host, i.gpu,
               greatest(epoch_ns(e.start_ts), epoch_ns(day_start()), i.from_ns) AS a_ns,
               least(epoch_ns(e.end_ts), epoch_ns(day_end()), i.to_ns) AS b_ns
        FROM _events AS e
        JOIN _job_held AS i ON i.job = e.job AND i.host = e.host
        WHERE e.end_ts > day_start() AND e.start_ts < day_end()
    ) WHERE b_ns > a_ns
),
covered AS (
    SELECT eg.job, sum(least(eg.b_ns, r.hi_ns) - greatest(eg.a_ns, r.lo_ns)) AS covered_ns
    FROM eg JOIN power_runs('job') AS r ON r.name = eg.job AND r.host = eg.host AND r.gpu = eg.gpu AND r.lo_ns < eg.b_ns AND r.hi_ns > eg.a_ns
    GROUP BY ALL
)
SELECT eg.job, least(coalesce(any_value(c.covered_ns), 0) / nullif(sum(eg.b_ns - eg.a_ns), 0)::DOUBLE, 1.0) AS power_coverage
FROM eg LEFT JOIN covered AS c USING (job)
GROUP BY eg.job;

CREATE OR REPLACE TEMP TABLE _from_events AS
WITH attributed AS (
    SELECT g.job, g.kind, b.e - a.e AS energy_j, (g.b_ns - g.a_ns) / 1e9 AS gpu_s
    FROM _event_gpus AS g
    JOIN _event_energy_at AS a ON a.host = g.host AND a.gpu = g.gpu AND a.t = g.a_ns
    JOIN _event_energy_at AS b ON b.host = g.host AND b.gpu = g.gpu AND b.t = g.b_ns
),
host_time AS (  -- each event's duration once (not per GPU), events of hosts with samples only
    SELECT job, kind, sum(b_ns - a_ns) / 1e9 AS host_s
    FROM (SELECT DISTINCT job, host, kind, a_ns, b_ns FROM _event_gpus)
    GROUP BY ALL
),
by_kind AS (
    SELECT job, kind, sum(energy_j) AS energy_j, sum(gpu_s) AS gpu_s, any_value(h.host_s) AS host_s
    FROM attributed JOIN host_time AS h USING (job, kind)
    GROUP BY ALL
),
job_totals AS (
    SELECT
        job,
        sum(energy_j) AS energy_j,
        sum(energy_j) FILTER (kind = 'step') / nullif(sum(gpu_s) FILTER (kind = 'step'), 0) AS step_mean_w,
        sum(energy_j) FILTER (kind <> 'step') / nullif(sum(gpu_s) FILTER (kind <> 'step'), 0) AS gap_mean_w,
        coalesce(sum(energy_j) FILTER (kind <> 'step'), 0) / nullif(sum(energy_j), 0) AS gap_energy_share,
        coalesce(sum(host_s) FILTER (kind <> 'step'), 0) / nullif(sum(host_s), 0) AS gap_time_share
    FROM by_kind GROUP BY ALL
),
steps AS (  -- a step and its tokens count on the day it ends (its energy is split at midnight)
    SELECT job, count(DISTINCT step) AS steps, sum(tokens) AS tokens
    FROM _events WHERE kind = 'step' AND end_ts > day_start() AND end_ts <= day_end() GROUP BY ALL
),
iterations AS (
    SELECT job, median(epoch(next_start) - epoch(start_ts)) AS median_step_s
    FROM (
        SELECT job, start_ts, lead(start_ts) OVER (PARTITION BY job, host ORDER BY start_ts) AS next_start
        FROM _events WHERE kind = 'step'
    )
    WHERE next_start IS NOT NULL
    GROUP BY ALL
),
boundaries AS (
    -- power 0.5 s either side of each gap's start, per host, then summed over the job's hosts
    SELECT e.job, e.kind, e.step, e.host,
           avg(s.w) FILTER (s.slot < e.s0) - avg(s.w) FILTER (s.slot >= e.s0) AS drop_w
    FROM _events AS e
    CROSS JOIN range(-5, 5) AS o(off)
    JOIN _job_slots AS s ON s.job = e.job AND s.host = e.host AND s.slot = e.s0 + o.off
    WHERE e.kind <> 'step'
    GROUP BY ALL
    HAVING count(*) = 10
),
drops AS (
    SELECT job, kind, median(drop_w) AS boundary_drop_median_w, max(drop_w) AS boundary_drop_max_w
    FROM (SELECT job, kind, step, sum(drop_w) AS drop_w FROM boundaries GROUP BY ALL)
    GROUP BY ALL
)
SELECT  -- every job with events, measured or not: a job whose GPUs had no samples keeps its row, energies NULL
    jc.job, st.steps, it.median_step_s,
    CASE WHEN jc.power_coverage > 0 THEN t.energy_j / nullif(st.steps, 0) END AS j_per_step,
    CASE WHEN jc.power_coverage > 0 THEN t.energy_j / nullif(st.tokens, 0) END AS j_per_token,
    t.step_mean_w, t.gap_mean_w, t.gap_energy_share, t.gap_time_share,
    k.kind AS boundary_kind,
    k.energy_j / nullif(k.gpu_s, 0) AS kind_mean_w,
    d.boundary_drop_median_w, d.boundary_drop_max_w,
    'job_events' AS source,
    jc.power_coverage
FROM _job_coverage AS jc
LEFT JOIN job_totals AS t USING (job)
LEFT JOIN steps AS st USING (job)
LEFT JOIN iterations AS it USING (job)
LEFT JOIN by_kind AS k ON k.job = jc.job AND k.kind <> 'step'
LEFT JOIN drops AS d ON d.job = jc.job AND d.kind = k.kind;

CREATE OR REPLACE TEMP TABLE _from_power AS
WITH series AS (
    SELECT job, slot, sum(w) AS w, sum(gpus) AS gpus
    FROM _job_slots
    WHERE job NOT IN (SELECT job FROM _events)
    GROUP BY ALL
),
levels AS (
    SELECT job, (quantile_cont(w, 0.1) + quantile_cont(w, 0.9)) / 2 AS threshold_w
    FROM series GROUP BY ALL
),
marked AS (
    SELECT s.*, s.w > l.threshold_w AS above,
           lag(s.w > l.threshold_w) OVER (PARTITION BY s.job ORDER BY s.slot) AS prev_above,
           lag(s.slot) OVER (PARTITION BY s.job ORDER BY s.slot) AS prev_slot
    FROM series AS s JOIN levels AS l USING (job)
),
runs AS (
    SELECT *, sum((above IS DISTINCT FROM prev_above OR slot <> prev_slot + 1)::INT) OVER (PARTITION BY job ORDER BY slot) AS run
    FROM marked
),
run_stats AS (
    SELECT job, run, any_value(above) AS above, min(slot) AS s0, sum(w) * 0.1 AS energy_j, sum(gpus) * 0.1 AS gpu_s, count(*) * 0.1 AS dur_s
    FROM runs GROUP BY ALL
),
step_runs AS (
    SELECT job, (s0 - lag(s0) OVER (PARTITION BY job ORDER BY s0)) * 0.1 AS iteration_s
    FROM run_stats WHERE above
),
falls AS (
    SELECT r.job, avg(s.w) FILTER (s.slot < r.s0) - avg(s.w) FILTER (s.slot >= r.s0) AS drop_w
    FROM run_stats AS r
    CROSS JOIN range(-5, 5) AS o(off)
    JOIN series AS s ON s.job = r.job AND s.slot = r.s0 + o.off
    WHERE NOT r.above
    GROUP BY r.job, r.run
    HAVING count(*) = 10
)
SELECT
    r.job,
    count(*) FILTER (above) AS steps,
    (SELECT median(iteration_s) FROM step_runs AS x WHERE x.job = r.job) AS median_step_s,
    sum(energy_j) / nullif(count(*) FILTER (above), 0) AS j_per_step,
    NULL::DOUBLE AS j_per_token,
    sum(energy_j) FILTER (above) / nullif(sum(gpu_s) FILTER (above), 0) AS step_mean_w,
    sum(energy_j) FILTER (NOT above) / nullif(sum(gpu_s) FILTER (NOT above), 0) AS gap_mean_w,
    coalesce(sum(energy_j) FILTER (NOT above), 0) / nullif(sum(energy_j), 0) AS gap_energy_share,
    coalesce(sum(dur_s) FILTER (NOT above), 0) / nullif(sum(dur_s), 0) AS gap_time_share,
    'power_drop' AS boundary_kind,
    sum(energy_j) FILTER (NOT above) / nullif(sum(gpu_s) FILTER (NOT above), 0) AS kind_mean_w,
    (SELECT median(drop_w) FROM falls AS f WHERE f.job = r.job) AS boundary_drop_median_w,
    (SELECT max(drop_w) FROM falls AS f WHERE f.job = r.job) AS boundary_drop_max_w,
    'power' AS source,
    NULL::DOUBLE AS power_coverage
FROM run_stats AS r
GROUP BY r.job;

SELECT
    getvariable('partition_date') AS date,
    job,
    steps::INTEGER AS steps,
    median_step_s::FLOAT AS median_step_s,
    round(j_per_step, 6) AS j_per_step,  -- rounded: parallel sums may differ in the last bit
    round(j_per_token, 9) AS j_per_token,
    step_mean_w::FLOAT AS step_mean_w,
    gap_mean_w::FLOAT AS gap_mean_w,
    gap_energy_share::FLOAT AS gap_energy_share,
    gap_time_share::FLOAT AS gap_time_share,
    boundary_kind,
    boundary_drop_median_w::FLOAT AS boundary_drop_median_w,
    boundary_drop_max_w::FLOAT AS boundary_drop_max_w,
    source,
    kind_mean_w::FLOAT AS kind_mean_w,
    power_coverage
FROM (FROM _from_events UNION ALL BY NAME FROM _from_power)
ORDER BY job, boundary_kind
