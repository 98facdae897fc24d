-- Where each workload's GPUs had their power measured on the partition day: the spans in which a
-- GPU's energy curve is continuous (consecutive samples at most 2 s apart, what energy_curve
-- integrates), cut to each window in which an endpoint or job held the GPU (gpu_assignments, not
-- clipped to the day). request_energy and training_energy take their power_coverage from it: an
-- energy over a time with no span is not a measurement.
-- From energy_curve's seconds with samples (first_t_ns, last_t_ns): samples inside one second are
-- linked, so a run breaks only where a second's first sample lies more than 2 s after the previous
-- second's last; a lone sample spans nothing. One window over the GPU's seconds marks the seconds
-- that start or end a run (LAG and LEAD share its sort); a second window over those edges only
-- pairs each start with its end (the next edge in time). A run's span is its first second's first
-- sample to its last second's last: seconds are in time order, so these are the run's min and max.
-- k is the workload kind ('endpoint' or 'job'): only the GPUs such a workload held during the day are read.
--   SET VARIABLE partition_date = DATE '2026-12-03';
--   SELECT * FROM power_runs('endpoint') WHERE name = 'ep-a';
-- Columns: kind (k), name, host, gpu, lo_ns, hi_ns (the span [lo_ns, hi_ns), ns).
CREATE OR REPLACE MACRO power_runs(k) AS TABLE
WITH _pr_seconds AS (  -- one sort: the gaps before and after each second; a run starts or ends where one passes 2 s
    SELECT e.host, e.gpu, e.t_ns, e.first_t_ns, e.last_t_ns,
           coalesce(e.first_t_ns - lag(e.last_t_ns) OVER w > 2000000000, true) AS starts_run,
           coalesce(lead(e.first_t_ns) OVER w - e.last_t_ns > 2000000000, true) AS ends_run
    FROM energy_curve AS e
    SEMI JOIN gpu_assignments AS a
        ON a.host = e.host AND a.gpu = e.gpu AND a.kind = k AND a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start())
    WHERE e.date = getvariable('partition_date') AND e.samples > 0
    WINDOW w AS (PARTITION BY e.host, e.gpu ORDER BY e.t_ns)
),
_pr_spans AS (  -- a run's first second and, next among the edges in time, its last (the same second for a run of one)
    SELECT host, gpu, starts_run, first_t_ns AS lo_ns,
           CASE WHEN ends_run THEN last_t_ns ELSE lead(last_t_ns) OVER (PARTITION BY host, gpu ORDER BY t_ns) END AS hi_ns
    FROM _pr_seconds
    WHERE starts_run OR ends_run
)
SELECT a.kind, a.name, a.host, a.gpu, greatest(s.lo_ns, a.from_ns) AS lo_ns, least(s.hi_ns, a.to_ns) AS hi_ns
FROM _pr_spans AS s
JOIN gpu_assignments AS a ON a.host = s.host AND a.gpu = s.gpu
WHERE s.starts_run AND s.hi_ns > s.lo_ns
  AND a.kind = k AND a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start())
  AND least(s.hi_ns, a.to_ns) > greatest(s.lo_ns, a.from_ns);
