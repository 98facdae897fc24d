-- phase_segments' rows of one endpoint from its runs, as SQL computed them before the step numbered
-- and shaped them in numpy (pipeline/assets/inference_phases.py: segment_numbers,
-- segment_table_batches). Relations: _segments (i, gk, src 0 requests / 1 power, ph, lo, hi in ns,
-- energy_j, mean_w, peak_w, prompt_tokens, output_tokens: one endpoint's runs), _phase_gpus (gk,
-- endpoint, host, gpu, tdp_w: its GPUs), _power_gpus (gk, sample_interval_ms); the variable
-- partition_date. Rows GPU by GPU (gk), each GPU's requests' runs then power's, in time order.
CREATE OR REPLACE TEMP TABLE _segment_numbers AS
-- endpoint_segment of each of one endpoint's runs (_segments: i, gk, src 0 requests / 1 power, ph, lo,
-- hi in ns, ...; _phase_gpus: its GPUs by gk): the endpoint-level run a GPU's row belongs to, numbered
-- from 1 per endpoint, source and phase, in (start, host, gpu) order: a row starts a new run where it
-- starts (µs, as stored) at or after every earlier row's end. Rows of the endpoint's GPUs whose runs
-- overlap are one run (a tensor-parallel prefill is on every GPU of its replica at once), so
-- count(DISTINCT endpoint_segment) counts one prefill once whatever the endpoint's GPU count, while
-- the per-GPU rows keep their energy. Only the columns the numbering needs go through the windows.
SELECT i, sum(starts_run::INTEGER) OVER (
    PARTITION BY src, ph ORDER BY start_us, host, gpu ROWS UNBOUNDED PRECEDING
)::INTEGER AS endpoint_segment
FROM (
    SELECT s.i, s.src, s.ph, s.lo // 1000 AS start_us, g.host, g.gpu,
           coalesce(s.lo // 1000 >= max(s.hi // 1000) OVER (
               PARTITION BY s.src, s.ph ORDER BY s.lo // 1000, g.host, g.gpu
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS starts_run
    FROM _segments AS s JOIN _phase_gpus AS g USING (gk)
);

-- the rows of each endpoint GPU (gk) from its runs (_segments), its endpoint's GPUs (_phase_gpus),
-- its sample interval (_power_gpus) and its runs' endpoint_segment (_segment_numbers, above),
-- requests' runs then power's, each in time order.
SELECT
    getvariable('partition_date') AS date,
    g.endpoint,
    g.host,
    g.gpu,
    make_timestamptz(s.lo // 1000) AS start_ts,
    make_timestamptz(s.hi // 1000) AS end_ts,
    CASE s.ph WHEN 0 THEN 'idle' WHEN 1 THEN 'decode' ELSE 'prefill' END AS phase,
    CASE s.src WHEN 0 THEN 'requests' ELSE 'power' END AS source,
    s.mean_w::FLOAT AS mean_w,
    s.peak_w::FLOAT AS peak_w,
    s.energy_j,
    s.prompt_tokens,
    s.output_tokens,
    coalesce(s.peak_w > g.tdp_w, false) AS above_tdp,
    pg.sample_interval_ms,
    n.endpoint_segment
FROM _segments AS s
JOIN _phase_gpus AS g USING (gk)
LEFT JOIN _power_gpus AS pg USING (gk)
JOIN _segment_numbers AS n USING (i)
ORDER BY s.gk, s.src, s.lo
