-- severity: WARN
-- description: Per GPU, integrated kWh ≈ mean W × hours covered within 2 % (two routes to the same energy; a partial GPU or a long gap makes them differ).
-- failure: {n} GPU(s) whose integrated energy and mean × time differ by > 2%
SELECT level, entity, energy_kwh, mean_w * hours_covered / 1000 AS from_mean FROM power_summary
WHERE date = getvariable('partition_date') AND level = 'gpu'
  AND abs(energy_kwh - mean_w * hours_covered / 1000) > 0.02 * greatest(energy_kwh, 1e-6)
