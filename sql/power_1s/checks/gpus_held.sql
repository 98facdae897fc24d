-- severity: WARN
-- description: On a host where endpoints or jobs hold GPUs, every GPU that draws power is held by one of them at that time (else its energy counts toward no endpoint or job).
-- failure: {n} GPU(s) draw power while no endpoint or job holds them (that energy counts toward none): {list}
WITH unheld AS (
    SELECT p.host, p.gpu, epoch_ns(p.ts) AS t_ns, p.energy_j
    FROM power_1s p
    WHERE p.date = getvariable('partition_date')
      AND p.host IN (SELECT host FROM gpu_assignments)
      AND NOT EXISTS (
          SELECT 1 FROM gpu_assignments a
          WHERE a.host = p.host AND a.gpu = p.gpu AND epoch_ns(p.ts) >= a.from_ns AND epoch_ns(p.ts) < a.to_ns
      )
),
per_gpu AS (
    SELECT host, gpu, count(*) AS unheld_s, sum(energy_j) AS unheld_energy_j,
           string_agg(DISTINCT lpad(((t_ns // 3600000000000) % 24)::VARCHAR, 2, '0'), ', '
                      ORDER BY lpad(((t_ns // 3600000000000) % 24)::VARCHAR, 2, '0')) AS hours_utc
    FROM unheld GROUP BY host, gpu
)
SELECT host || '/' || gpu || ' in hour(s) ' || hours_utc || ' UTC' AS gpu_and_hours, host, gpu, unheld_s,
       round(unheld_energy_j, 1) AS unheld_energy_j, hours_utc
FROM per_gpu ORDER BY host, gpu
