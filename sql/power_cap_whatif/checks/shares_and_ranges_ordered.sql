-- severity: ERROR
-- description: shares lie in [0, 1], energy above the cap is ≥ 0, and each estimate lies between its low and high ends
-- failure: {n} row(s) with a share outside [0, 1] or an estimate outside its range ({list})
SELECT entity, phase, cap_factor
FROM power_cap_whatif
WHERE date = getvariable('partition_date')
  AND NOT (coalesce(time_above_share BETWEEN 0 AND 1 + 1e-9, true)
           AND coalesce(energy_above_share BETWEEN 0 AND 1 + 1e-9, true)
           AND energy_above_cap_j >= 0
           AND coalesce(est_energy_low_j <= est_energy_j * (1 + 1e-9) AND est_energy_j <= est_energy_high_j * (1 + 1e-9), true)
           AND est_gpu_seconds_low <= est_gpu_seconds * (1 + 1e-9) AND est_gpu_seconds <= est_gpu_seconds_high * (1 + 1e-9))
