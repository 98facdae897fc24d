-- severity: ERROR
-- description: Each GPU's cumulative energy at the end of its last second equals its power_1s day energy within 0.01 % (both integrate the same trapezoids; they differ only where samples share a timestamp).
-- failure: {n} GPU(s) whose curve total differs from power_1s by > 0.01 %
WITH c AS (SELECT host, gpu, max(end_energy_j) AS j FROM energy_curve WHERE date = getvariable('partition_date') GROUP BY ALL),
     s AS (SELECT host, gpu, sum(energy_j) AS j FROM power_1s WHERE date = getvariable('partition_date') GROUP BY ALL)
SELECT host, gpu, c.j, s.j FROM c FULL JOIN s USING (host, gpu)
WHERE c.j IS NULL OR s.j IS NULL OR abs(c.j - s.j) > 1e-4 * greatest(abs(s.j), 1)
ORDER BY 1, 2
