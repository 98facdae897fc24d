-- phase_segments: maximal runs of one label per endpoint GPU on the 100 ms grid of phase_timeline,
-- from the request log (source 'requests', label phase) and from power alone (source 'power',
-- label power_phase). A gap in the power (no row for a slot) ends a run. end_ts is exclusive
-- (last slot + 100 ms). mean_w/peak_w are over the run's 100 ms slot means, energy_j their
-- sum × 0.1 s; prompt_tokens / output_tokens the endpoint's logged tokens processed in the run
-- (NULL without a request log); above_tdp: the peak 100 ms mean exceeded the GPU's TDP.
-- Runs are gaps and islands: within one (GPU, source, label), consecutive slots share
-- slot - row_number(); integer keys keep the window and the grouping cheap, and each label stream
-- is ranked on the timeline's rows directly (two sorts of the day instead of one of both streams unioned).
WITH gpus AS (
    SELECT endpoint, host, gpu, tdp_w, row_number() OVER (ORDER BY endpoint, host, gpu) AS gk
    FROM inventory_gpus WHERE endpoint IS NOT NULL
),
labels AS (
    SELECT * FROM (VALUES (0, 'idle'), (1, 'decode'), (2, 'prefill')) AS l(ph, phase)
),
t AS NOT MATERIALIZED (  -- scanned once per label stream: cheaper than holding (spilling) the day
    SELECT g.gk, slot_100ms(t.ts) AS slot, t.power_w, t.energy_j, t.prompt_tokens, t.output_tokens,
           CASE t.phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 WHEN 'prefill' THEN 2 END AS req_ph,
           CASE t.power_phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 WHEN 'prefill' THEN 2 END AS pow_ph
    FROM phase_timeline AS t JOIN gpus AS g USING (endpoint, host, gpu)
    WHERE t.date = getvariable('partition_date')
),
islands AS (  -- each row's run in both label streams: slot - its rank among the GPU's slots of that label
    SELECT gk, slot, power_w, energy_j, prompt_tokens, output_tokens, 0 AS src, req_ph AS ph,
           slot - row_number() OVER (PARTITION BY gk, req_ph ORDER BY slot) AS run
    FROM t WHERE req_ph IS NOT NULL
    UNION ALL
    SELECT gk, slot, power_w, energy_j,
           CASE WHEN req_ph IS NOT NULL THEN prompt_tokens END,
           CASE WHEN req_ph IS NOT NULL THEN output_tokens END,
           1, pow_ph, slot - row_number() OVER (PARTITION BY gk, pow_ph ORDER BY slot)
    FROM t WHERE pow_ph IS NOT NULL
),
runs AS (
    SELECT gk, src, ph, run,
           min(slot) AS first_slot, max(slot) AS last_slot,
           xsum(power_w) / count(power_w) AS mean_w, max(power_w) AS peak_w,
           coalesce(xsum(energy_j), 0) AS energy_j,
           xsum(prompt_tokens) AS prompt_tokens, xsum(output_tokens) AS output_tokens
    FROM islands
    GROUP BY gk, src, ph, run
)
SELECT
    getvariable('partition_date') AS date,
    g.endpoint,
    g.host,
    g.gpu,
    slot_ts(r.first_slot) AS start_ts,
    slot_ts(r.last_slot + 1) AS end_ts,
    l.phase,
    CASE r.src WHEN 0 THEN 'requests' ELSE 'power' END AS source,
    r.mean_w::FLOAT AS mean_w,
    r.peak_w::FLOAT AS peak_w,
    r.energy_j,
    r.prompt_tokens,
    r.output_tokens,
    coalesce(r.peak_w > g.tdp_w, false) AS above_tdp
FROM runs AS r JOIN gpus AS g USING (gk) JOIN labels AS l USING (ph)
ORDER BY r.gk, r.src, r.first_slot
