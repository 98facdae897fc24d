-- phase_segments: maximal runs of one label per endpoint GPU.
-- source 'requests': runs of the endpoint's label over its exact elementary intervals
--   (phase_intervals): start_ts / end_ts are the requests' own event timestamps (µs; end
--   exclusive); energy_j = E(end) − E(start) of the GPU's energy curve (exact for piecewise-linear
--   power), mean_w = energy_j / duration, peak_w the highest power of the GPU's trace inside the
--   run (its samples and the interpolated values at both ends); prompt_tokens / output_tokens the
--   endpoint's tokens processed in the run.
-- source 'power': runs of the power-only label on the GPU's own samples (pipeline/phases/power_detect.py,
--   the asset's kernel; none where the source cannot resolve prefills: a 1 s
--   average or samples > 300 ms apart); start_ts / end_ts are sample instants (trailing-average sources:
--   the driver buffer) or midpoints between two samples (instant readings), energy_j =
--   E(end) − E(start) of the same energy curve, mean_w = energy_j / duration, peak_w the highest
--   sample in the run (and the one at its start); tokens NULL (they belong to the request log).
-- above_tdp: peak_w exceeded the GPU's TDP.
-- sample_interval_ms: median spacing of the GPU's power samples (its energy curve) that day: the
--   resolution behind both sources' energies and the power-only boundaries (temp table _power_gpus).
-- The runs, their energies and peaks come from the asset's kernel (before= hook `segments`,
-- pipeline/assets/inference_phases.py), one GPU at a time on its own curve read once: temp tables
-- _phase_gpus (endpoint GPUs, integer key gk: one per GPU and time the endpoint held it, held_gpus), _power_gpus (source and sample interval per GPU) and
-- _segments (gk, src 0 requests / 1 power, ph, lo, hi in ns, energy_j, mean_w, peak_w, tokens).
-- endpoint_segment: the endpoint-level run a GPU's row belongs to, numbered from 1 per endpoint,
--   source and phase: rows of the endpoint's GPUs whose runs overlap are one run (a tensor-parallel
--   prefill is on every GPU of its replica at once), so count(DISTINCT endpoint_segment) counts
--   one prefill once whatever the endpoint's GPU count, while the per-GPU rows keep their energy.
WITH labels AS (
    SELECT * FROM (VALUES (0, 'idle'), (1, 'decode'), (2, 'prefill')) AS l(ph, phase)
),
gpu_runs AS (
SELECT
    getvariable('partition_date') AS date,
    g.endpoint,
    g.host,
    g.gpu,
    make_timestamptz(s.lo // 1000) AS start_ts,
    make_timestamptz(s.hi // 1000) AS end_ts,
    l.phase,
    CASE s.src WHEN 0 THEN 'requests' ELSE 'power' END AS source,
    s.mean_w::FLOAT AS mean_w,
    s.peak_w::FLOAT AS peak_w,
    s.energy_j,
    s.prompt_tokens,
    s.output_tokens,
    coalesce(s.peak_w > g.tdp_w, false) AS above_tdp,
    pg.sample_interval_ms,
    s.gk,
    s.src,
    s.lo
FROM _segments AS s
JOIN _phase_gpus AS g USING (gk) JOIN labels AS l USING (ph)
LEFT JOIN _power_gpus AS pg USING (gk)
),
starts AS (
    SELECT *, coalesce(start_ts >= max(end_ts) OVER (
        PARTITION BY endpoint, source, phase ORDER BY start_ts, host, gpu
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS starts_run
    FROM gpu_runs
)
SELECT
    date, endpoint, host, gpu, start_ts, end_ts, phase, source, mean_w, peak_w, energy_j, prompt_tokens,
    output_tokens, above_tdp, sample_interval_ms,
    sum(starts_run::INTEGER) OVER (
        PARTITION BY endpoint, source, phase ORDER BY start_ts, host, gpu ROWS UNBOUNDED PRECEDING
    )::INTEGER AS endpoint_segment
FROM starts
ORDER BY gk, src, lo
