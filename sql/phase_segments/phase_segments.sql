-- phase_segments: maximal runs of one label per endpoint GPU.
-- source 'requests': runs of the endpoint's label over its exact elementary intervals
--   (phase_intervals): start_ts / end_ts are the requests' own event timestamps (µs; end
--   exclusive); energy_j = E(end) − E(start) of the GPU's energy curve (exact for piecewise-linear
--   power), mean_w = energy_j / duration, peak_w the highest power of the GPU's trace inside the
--   run (its samples and the interpolated values at both ends); prompt_tokens / output_tokens the
--   endpoint's tokens processed in the run.
-- source 'power': runs of the power-only label on the GPU's own samples (pipeline/phases/power_detect.py,
--   temp table _power_runs left by the asset; none where the source cannot resolve prefills: a 1 s
--   average or samples > 300 ms apart); start_ts / end_ts are sample instants (trailing-average sources:
--   the driver buffer) or midpoints between two samples (instant readings), energy_j =
--   E(end) − E(start) of the same energy curve, mean_w = energy_j / duration, peak_w the highest
--   sample in the run (and the one at its start); tokens NULL (they belong to the request log).
-- above_tdp: peak_w exceeded the GPU's TDP.
-- sample_interval_ms: median spacing of the GPU's power samples (its energy curve) that day: the
--   resolution behind both sources' energies and the power-only boundaries (temp table _power_gpus).
WITH gpus AS (
    SELECT endpoint, host, gpu, tdp_w, row_number() OVER (ORDER BY endpoint, host, gpu) AS gk
    FROM inventory_gpus WHERE endpoint IS NOT NULL
),
labels AS (
    SELECT * FROM (VALUES (0, 'idle'), (1, 'decode'), (2, 'prefill')) AS l(ph, phase)
),
curve AS NOT MATERIALIZED (
    SELECT c.host, c.gpu, c.t_ns, c.power_w, c.energy_j, c.next_t_ns, c.next_w
    FROM energy_curve AS c WHERE c.date = getvariable('partition_date')
),
req_runs AS (  -- consecutive intervals of one label (intervals are contiguous: gaps and islands on row numbers)
    SELECT endpoint, phase, min(start_ns) AS lo, max(end_ns) AS hi,
           xsum(prompt_tokens) AS prompt_tokens, xsum(output_tokens) AS output_tokens
    FROM (
        SELECT *, row_number() OVER (PARTITION BY endpoint ORDER BY start_ns)
                  - row_number() OVER (PARTITION BY endpoint, phase ORDER BY start_ns) AS run
        FROM phase_intervals WHERE date = getvariable('partition_date')
    )
    GROUP BY endpoint, phase, run
),
req_gpu AS (
    SELECT r.*, g.host, g.gpu, g.tdp_w, g.gk FROM req_runs AS r JOIN gpus AS g USING (endpoint)
),
ends AS (  -- each GPU's energy and power at both ends of each run
    SELECT x.endpoint, x.host, x.gpu, x.lo, x.t,
           coalesce(curve_energy_at(c.t_ns, c.power_w, c.energy_j, c.next_t_ns, c.next_w, x.t), 0) AS e_j,
           CASE WHEN c.next_t_ns IS NOT NULL AND x.t > c.t_ns
                THEN c.power_w::DOUBLE + (c.next_w::DOUBLE - c.power_w::DOUBLE) * (x.t - c.t_ns) / (c.next_t_ns - c.t_ns)
                WHEN x.t = c.t_ns THEN c.power_w END AS p_w
    FROM (SELECT endpoint, host, gpu, lo, unnest([lo, hi]) AS t FROM req_gpu) AS x
    ASOF LEFT JOIN curve AS c ON c.host = x.host AND c.gpu = x.gpu AND c.t_ns <= x.t
),
inside AS (  -- the highest sample inside each run (each sample joined to the run it falls in)
    SELECT r.host, r.gpu, r.lo, max(c.power_w) AS peak_w
    FROM curve AS c
    ASOF JOIN (SELECT DISTINCT host, gpu, lo, hi FROM req_gpu) AS r ON r.host = c.host AND r.gpu = c.gpu AND c.t_ns >= r.lo
    WHERE c.t_ns < r.hi
    GROUP BY ALL
),
req_seg AS (
    SELECT g.gk, 0 AS src, l.ph, g.lo, g.hi,
           b.e_j - a.e_j AS energy_j,
           (b.e_j - a.e_j) / ((g.hi - g.lo) / 1e9) AS mean_w,
           greatest(i.peak_w, a.p_w, b.p_w) AS peak_w,
           g.prompt_tokens, g.output_tokens
    FROM req_gpu AS g
    JOIN labels AS l USING (phase)
    JOIN ends AS a ON a.host = g.host AND a.gpu = g.gpu AND a.lo = g.lo AND a.t = g.lo
    JOIN ends AS b ON b.host = g.host AND b.gpu = g.gpu AND b.lo = g.lo AND b.t = g.hi
    LEFT JOIN inside AS i ON i.host = g.host AND i.gpu = g.gpu AND i.lo = g.lo
),
pow_ends AS (  -- each GPU's energy at both ends of each power-only run (sample instants or midpoints between two)
    SELECT x.gk, x.lo, x.t,
           coalesce(curve_energy_at(c.t_ns, c.power_w, c.energy_j, c.next_t_ns, c.next_w, x.t), 0) AS e_j
    FROM (SELECT r.gk, g.host, g.gpu, r.lo, unnest([r.lo, r.hi]) AS t FROM _power_runs AS r JOIN gpus AS g USING (gk)) AS x
    ASOF LEFT JOIN curve AS c ON c.host = x.host AND c.gpu = x.gpu AND c.t_ns <= x.t
),
pow_seg AS (  -- the power-only runs at the samples' own instants (temp table _power_runs, left by the asset:
              -- pipeline/phases/power_detect.py)
    SELECT r.gk, 1 AS src, r.ph, r.lo, r.hi,
           b.e_j - a.e_j AS energy_j,
           (b.e_j - a.e_j) / ((r.hi - r.lo) / 1e9) AS mean_w,
           r.peak_w,
           NULL::DOUBLE AS prompt_tokens, NULL::DOUBLE AS output_tokens
    FROM _power_runs AS r
    JOIN pow_ends AS a ON a.gk = r.gk AND a.lo = r.lo AND a.t = r.lo
    JOIN pow_ends AS b ON b.gk = r.gk AND b.lo = r.lo AND b.t = r.hi
)
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
    pg.sample_interval_ms
FROM (FROM req_seg UNION ALL FROM pow_seg) AS s
JOIN gpus AS g USING (gk) JOIN labels AS l USING (ph)
LEFT JOIN _power_gpus AS pg ON pg.host = g.host AND pg.gpu = g.gpu
ORDER BY s.gk, s.src, s.lo
