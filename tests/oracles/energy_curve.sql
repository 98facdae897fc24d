-- energy_curve: per GPU and second, its cumulative energy since its first sample of the day at the
-- second's start and end, from its best-source samples (view power_day: nvml-buffer >
-- nvml-field/simulated > nvidia-smi instant > any 1 s average): trapezoid between consecutive
-- samples, a segment longer than 2 s is a gap and adds nothing (as power_1s); samples with the
-- same timestamp are one sample (their mean). One row per second that holds a sample or whose
-- start lies inside a segment; a second without a row has no power measured.
--   t_ns                : the second's start (ns since the epoch)
--   energy_j, end_energy_j : J from the GPU's first sample of the day to the second's start / end
--   power_w, end_power_w: W at the second's start / end, linear between the samples around it;
--                         NULL where no segment crosses that instant (a gap, before the first
--                         sample, after the last, midnight)
--   first_t_ns, last_t_ns, samples: the second's samples (NULL, NULL, 0 when none)
--   source_rank         : the rank of those samples' source (macro source_rank)
-- E(t) inside a second: energy_j plus the trapezoids of the line through (start, power_w), the
-- second's samples and (end, end_power_w) up to t (macros energy_at_ns / energy_between in
-- sql/views/power_energy.sql): exact for piecewise-linear power.
-- This file is the definition (it runs as-is in the DuckDB CLI); the asset writes the same rows
-- with numpy (pipeline/series/energy.py energy_seconds; tests/test_power_kernels.py holds the two equal).
WITH s AS (
    SELECT host, gpu, t_ns, avg(power_w::DOUBLE) AS power_w, min(source_rank(source, is_average)) AS source_rank
    FROM power_day
    GROUP BY host, gpu, t_ns
),
seg AS (
    SELECT *, lead(t_ns) OVER w AS nt, lead(power_w) OVER w AS nw
    FROM s
    WINDOW w AS (PARTITION BY host, gpu ORDER BY t_ns)
),
curve AS (
    SELECT host, gpu, t_ns, power_w, source_rank,
           nt - t_ns <= 2000000000 AS linked, nt, nw,
           coalesce(sum(CASE WHEN nt - t_ns <= 2000000000 THEN (power_w + nw) / 2 * (nt - t_ns) / 1e9 END)
                    OVER (PARTITION BY host, gpu ORDER BY t_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS energy_j
    FROM seg
),
seconds AS (  -- the seconds holding a sample or starting inside a segment (at most two after its sample)
    SELECT DISTINCT host, gpu, b FROM (
        SELECT host, gpu, t_ns // 1000000000 * 1000000000 AS b FROM curve
        UNION ALL
        SELECT host, gpu, (t_ns // 1000000000 + k) * 1000000000 FROM curve, range(1, 3) AS r(k)
        WHERE linked AND (t_ns // 1000000000 + k) * 1000000000 < nt
    ) WHERE b < epoch_ns(day_end())
),
edges AS (  -- each second's start and end
    SELECT host, gpu, b, b AS x FROM seconds UNION ALL SELECT host, gpu, b, b + 1000000000 FROM seconds
),
at_edge AS (  -- E and P at each edge from the sample at or before it (the trapezoid to the edge, the power linear towards the next sample)
    SELECT e.host, e.gpu, e.b, e.x,
           CASE WHEN c.t_ns IS NULL THEN 0.0
                WHEN c.linked AND e.x > c.t_ns
                THEN c.energy_j + (e.x - c.t_ns) / 1e9 * (c.power_w + (c.power_w + (c.nw - c.power_w) * (e.x - c.t_ns) / (c.nt - c.t_ns))) / 2
                ELSE c.energy_j END AS e,
           CASE WHEN e.x >= epoch_ns(day_end()) THEN NULL
                WHEN c.linked AND e.x > c.t_ns THEN c.power_w + (c.nw - c.power_w) * (e.x - c.t_ns) / (c.nt - c.t_ns)
                WHEN e.x = c.t_ns THEN c.power_w END AS p
    FROM edges AS e
    ASOF LEFT JOIN curve AS c ON c.host = e.host AND c.gpu = e.gpu AND e.x >= c.t_ns
),
inside AS (
    SELECT host, gpu, t_ns // 1000000000 * 1000000000 AS b, min(t_ns) AS first_t_ns, max(t_ns) AS last_t_ns,
           count(*) AS samples, min(source_rank) AS source_rank
    FROM curve GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    s.host,
    s.gpu,
    s.b AS t_ns,
    a0.e AS energy_j,
    a1.e AS end_energy_j,
    a0.p AS power_w,
    a1.p AS end_power_w,
    i.first_t_ns,
    i.last_t_ns,
    coalesce(i.samples, 0)::INTEGER AS samples,
    i.source_rank::UTINYINT AS source_rank
FROM seconds AS s
JOIN at_edge AS a0 ON a0.host = s.host AND a0.gpu = s.gpu AND a0.b = s.b AND a0.x = s.b
JOIN at_edge AS a1 ON a1.host = s.host AND a1.gpu = s.gpu AND a1.b = s.b AND a1.x = s.b + 1000000000
LEFT JOIN inside AS i ON i.host = s.host AND i.gpu = s.gpu AND i.b = s.b
ORDER BY s.host, s.gpu, s.b
