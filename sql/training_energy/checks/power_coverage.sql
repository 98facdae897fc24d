-- severity: WARN
-- description: Every training job's events ran while all its GPUs had power samples (power_coverage ≥ 99.99 %: the sample interval at each edge of the day, which no day's energy_curve spans, is not a gap); where none did, its energies are NULL.
-- failure: training jobs without full power coverage: {list}
SELECT job || ': ' || round(100 * any_value(power_coverage), CASE WHEN any_value(power_coverage) >= 0.999 THEN 3 ELSE 1 END)
       || ' % of its events'' GPU-time had power samples'
       || CASE WHEN any_value(power_coverage) = 0 THEN ' (energies null)' ELSE '' END AS uncovered
FROM training_energy
WHERE date = getvariable('partition_date') AND source = 'job_events'
GROUP BY job
HAVING any_value(power_coverage) < 0.9999 OR any_value(power_coverage) IS NULL
ORDER BY 1
