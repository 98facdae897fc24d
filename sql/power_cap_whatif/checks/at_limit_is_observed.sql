-- severity: ERROR
-- description: at the enforced limit (cap_factor 1) the estimate is the observed day: same energy and duration
-- failure: {n} row(s) at the enforced limit whose estimate differs from what was observed ({list})
SELECT entity, phase, energy_j, est_energy_j, gpu_seconds, est_gpu_seconds
FROM power_cap_whatif
WHERE date = getvariable('partition_date') AND cap_factor = 1
  AND (abs(est_energy_j - energy_j) > 1e-9 * greatest(abs(energy_j), 1)
       OR abs(est_gpu_seconds - gpu_seconds) > 1e-9 * greatest(gpu_seconds, 1))
