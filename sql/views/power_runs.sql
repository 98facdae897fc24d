-- Where each workload's GPUs had their power measured on the partition day: the spans in which a
-- GPU's energy curve is continuous (consecutive samples at most 2 s apart, what energy_curve
-- integrates), cut to each window in which an endpoint or job held the GPU (gpu_assignments, not
-- clipped to the day). request_energy and training_energy take their power_coverage from it: an
-- energy over a time with no span is not a measurement.
-- From energy_curve's seconds with samples (first_t_ns, last_t_ns): samples inside one second are
-- linked, so a run breaks only where a second's first sample lies more than 2 s after the previous
-- second's last (gaps and islands: LAG over the GPU's seconds); a lone sample spans nothing.
--   SET VARIABLE partition_date = DATE '2026-12-03';
--   SELECT * FROM power_runs() WHERE kind = 'endpoint' AND name = 'ep-a';
-- Columns: kind ('endpoint' or 'job'), name, host, gpu, lo_ns, hi_ns (the span [lo_ns, hi_ns), ns).
CREATE OR REPLACE MACRO power_runs() AS TABLE
WITH _pr_seconds AS (
    SELECT host, gpu, t_ns, first_t_ns, last_t_ns,
           coalesce(first_t_ns - lag(last_t_ns) OVER (PARTITION BY host, gpu ORDER BY t_ns) > 2000000000, true) AS starts_run
    FROM energy_curve
    WHERE date = getvariable('partition_date') AND samples > 0
),
_pr_numbered AS (
    SELECT host, gpu, first_t_ns, last_t_ns,
           sum(starts_run::INTEGER) OVER (PARTITION BY host, gpu ORDER BY t_ns ROWS UNBOUNDED PRECEDING) AS run
    FROM _pr_seconds
),
_pr_spans AS (
    SELECT host, gpu, min(first_t_ns) AS lo_ns, max(last_t_ns) AS hi_ns
    FROM _pr_numbered GROUP BY host, gpu, run
    HAVING max(last_t_ns) > min(first_t_ns)
)
SELECT a.kind, a.name, a.host, a.gpu, greatest(s.lo_ns, a.from_ns) AS lo_ns, least(s.hi_ns, a.to_ns) AS hi_ns
FROM _pr_spans AS s
JOIN gpu_assignments AS a ON a.host = s.host AND a.gpu = s.gpu
WHERE a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start())
  AND least(s.hi_ns, a.to_ns) > greatest(s.lo_ns, a.from_ns);
