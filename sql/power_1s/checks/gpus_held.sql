-- severity: WARN
-- description: On a host where endpoints or jobs hold GPUs, every GPU that draws power is held by one of them at that time (else its energy counts toward no endpoint or job).
-- failure: {n} GPU(s) draw power while no endpoint or job holds them (that energy counts toward none): {list}
-- The gaps between each GPU's assignments (disjoint pieces, gpu_assignments) within the day come first,
-- so only the seconds of GPUs with a gap are read one by one.
WITH day AS (
    SELECT epoch_ns(getvariable('partition_date')::TIMESTAMP) AS d0,
           epoch_ns(getvariable('partition_date')::TIMESTAMP) + 86400 * 1000000000::BIGINT AS d1
),
pieces AS (
    SELECT host, gpu, from_ns, to_ns,
           lag(to_ns) OVER (PARTITION BY host, gpu ORDER BY from_ns) AS prev_to,
           lead(from_ns) OVER (PARTITION BY host, gpu ORDER BY from_ns) AS next_from
    FROM gpu_assignments
),
gaps AS (
    SELECT host, gpu, coalesce(prev_to, -(2::BIGINT ** 62)) AS lo, from_ns AS hi FROM pieces WHERE prev_to IS NULL OR prev_to < from_ns
    UNION ALL
    SELECT host, gpu, to_ns, 2::BIGINT ** 62 FROM pieces WHERE next_from IS NULL
    UNION ALL  -- an inventory GPU of such a host that no assignment names: the whole day (a GPU
               -- the inventory lacks is named by the check gpus_in_inventory)
    SELECT i.host, i.gpu, -(2::BIGINT ** 62), 2::BIGINT ** 62 FROM inventory_gpus i
    WHERE i.host IN (SELECT host FROM gpu_assignments) AND NOT EXISTS (
        SELECT 1 FROM gpu_assignments a WHERE a.host = i.host AND a.gpu = i.gpu)
),
day_gaps AS (
    SELECT host, gpu, greatest(lo, d0) AS lo, least(hi, d1) AS hi FROM gaps, day WHERE lo < d1 AND hi > d0
),
unheld AS (
    SELECT p.host, p.gpu, epoch_ns(p.ts) AS t_ns, p.energy_j
    FROM power_1s p JOIN day_gaps g ON p.host = g.host AND p.gpu = g.gpu
    WHERE p.date = getvariable('partition_date') AND epoch_ns(p.ts) >= g.lo AND epoch_ns(p.ts) < g.hi
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
