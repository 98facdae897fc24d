-- severity: ERROR
-- description: Gap energy and time shares lie in [0, 1].
SELECT job, gap_energy_share, gap_time_share FROM training_energy WHERE date = getvariable('partition_date')
  AND NOT (gap_energy_share BETWEEN 0 AND 1 AND gap_time_share BETWEEN 0 AND 1)
