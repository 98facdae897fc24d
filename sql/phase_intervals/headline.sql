SELECT count(*) AS intervals,
       round(coalesce(sum(end_ns - start_ns) FILTER (WHERE phase = 'prefill') / nullif(sum(end_ns - start_ns) FILTER (WHERE phase <> 'idle'), 0), 0), 4) AS prefill_share_of_busy_time,
       round(coalesce(sum(energy_j) FILTER (WHERE phase = 'prefill') / nullif(sum(energy_j) FILTER (WHERE phase <> 'idle'), 0), 0), 4) AS prefill_share_of_busy_energy
FROM phase_intervals WHERE date = getvariable('partition_date')
