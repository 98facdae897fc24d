-- phase_segments: maximal runs of one label per endpoint GPU on the 100 ms grid of phase_timeline,
-- from the request log (source 'requests', label phase) and from power alone (source 'power',
-- label power_phase; held/missing power ends a power run). end_ts is exclusive (last slot + 100 ms).
-- mean_w/peak_w are over the run's 100 ms slot means, energy_j their sum × 0.1 s; prompt_tokens /
-- output_tokens the endpoint's logged tokens processed in the run (NULL without a request log);
-- above_tdp: the peak 100 ms mean exceeded the GPU's TDP.
WITH labelled AS (
    SELECT endpoint, host, gpu, slot_of(ts) AS slot, power_w, energy_j, prompt_tokens, output_tokens,
           'requests' AS source, phase
    FROM phase_timeline
    WHERE date = getvariable('partition_date') AND phase IS NOT NULL
    UNION ALL
    SELECT endpoint, host, gpu, slot_of(ts), power_w, energy_j,
           CASE WHEN phase IS NOT NULL THEN prompt_tokens END,
           CASE WHEN phase IS NOT NULL THEN output_tokens END,
           'power', power_phase
    FROM phase_timeline
    WHERE date = getvariable('partition_date') AND power_phase IS NOT NULL
),
runs AS (  -- gaps and islands: within one label, consecutive slots share slot - row_number()
    SELECT *, slot - row_number() OVER (PARTITION BY endpoint, host, gpu, source, phase ORDER BY slot) AS run
    FROM labelled
)
SELECT
    getvariable('partition_date') AS date,
    r.endpoint,
    r.host,
    r.gpu,
    slot_ts(min(r.slot)) AS start_ts,
    slot_ts(max(r.slot) + 1) AS end_ts,
    r.phase,
    r.source,
    (xsum(r.power_w) / count(r.power_w))::FLOAT AS mean_w,
    max(r.power_w)::FLOAT AS peak_w,
    coalesce(xsum(r.energy_j), 0) AS energy_j,
    xsum(r.prompt_tokens) AS prompt_tokens,
    xsum(r.output_tokens) AS output_tokens,
    coalesce(max(r.power_w) > any_value(i.tdp_w), false) AS above_tdp
FROM runs AS r JOIN inventory_gpus AS i USING (host, gpu)
GROUP BY r.endpoint, r.host, r.gpu, r.source, r.phase, r.run
ORDER BY r.endpoint, r.host, r.gpu, r.source, start_ts
