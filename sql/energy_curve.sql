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
--
-- The curve itself is computed by a polars kernel (pipeline/kernels.py: energy_curve, measured
-- faster than the same as DuckDB windows) into the temp table _energy_curve, per GPU sorted by
-- time; its SQL equivalent, for reading:
--   WITH s AS (SELECT host, gpu, t_ns, avg(power_w) AS power_w FROM power_day GROUP BY ALL)
--   SELECT *, lead(t_ns) OVER w AS next_t_ns, sum(trapezoid to the next sample) OVER (w ROWS
--          BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS energy_j
--   FROM s WINDOW w AS (PARTITION BY host, gpu ORDER BY t_ns)
SELECT
    getvariable('partition_date') AS date,
    host,
    gpu,
    t_ns,
    power_w::FLOAT AS power_w,
    energy_j,
    next_t_ns,
    next_w::FLOAT AS next_w,
    source,
    is_average
FROM _energy_curve
