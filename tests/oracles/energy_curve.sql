-- energy_curve: per GPU and sample of its best source (view power_day: nvml-buffer > nvml-field/
-- simulated > nvidia-smi instant > any 1 s average), the cumulative energy since the GPU's first
-- sample of the day: trapezoid between consecutive samples, a segment longer than 2 s is a gap and
-- adds nothing (as power_1s). Samples with the same timestamp are one sample (their mean).
--   t_ns       : the sample's time (ns since the epoch, exact; make_timestamptz(t_ns // 1000) for a timestamp)
--   power_w    : W at the sample
--   energy_j   : J from the GPU's first sample of the day up to this sample
--   next_t_ns, next_w: the following sample, NULL when it is more than 2 s away (a gap) or there is none
-- The energy of any interval [a, b] is E(b) − E(a), with E(t) = energy_j + the trapezoid from the
-- sample at or before t to t, the power linear between the sample and the next one (macros
-- energy_at / energy_between in sql/views/energy.sql): exact for piecewise-linear power.
-- A test oracle (it runs as-is in the DuckDB CLI): production writes energy_curve with the series
-- engine only (pipeline/series/registry.py energy_curve_rows); tests/test_power_kernels.py holds the
-- engine's rows to this file's. The windows below sort every raw sample, ~3x the engine's CPU.
WITH s AS (
    SELECT host, gpu, t_ns, avg(power_w) AS power_w, any_value(source) AS source, bool_or(is_average) AS is_average
    FROM power_day
    GROUP BY host, gpu, t_ns
),
seg AS (
    SELECT *,
           lead(t_ns) OVER w AS nt,
           lead(power_w) OVER w AS nw
    FROM s
    WINDOW w AS (PARTITION BY host, gpu ORDER BY t_ns)
),
linked AS (
    SELECT host, gpu, t_ns, power_w, source, is_average,
           CASE WHEN nt - t_ns <= 2000000000 THEN nt END AS next_t_ns,
           CASE WHEN nt - t_ns <= 2000000000 THEN nw END AS next_w
    FROM seg
)
SELECT
    getvariable('partition_date') AS date,
    host,
    gpu,
    t_ns,
    power_w::FLOAT AS power_w,
    coalesce(sum(CASE WHEN next_t_ns IS NOT NULL THEN (power_w + next_w) / 2 * (next_t_ns - t_ns) / 1e9 END)
             OVER (PARTITION BY host, gpu ORDER BY t_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS energy_j,
    next_t_ns,
    next_w::FLOAT AS next_w,
    source,
    is_average
FROM linked
ORDER BY host, gpu, t_ns
