-- fleet_power_grid, fleet-day part: per bin, the role and fleet rows summed from the cluster-days'
-- parts (cluster_role parts for a role, cluster rows for the fleet). A bin is complete when every
-- part that reports this day is there and complete. Reads no per-GPU data.
WITH parts AS (
    FROM cluster_parts('fleet_power_grid')
),
expected AS (
    SELECT level, entity, count(DISTINCT part) AS n FROM parts GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    p.level,
    p.entity,
    p.ts,
    sum(p.power_w) AS power_w,
    sum(p.gpus_reporting)::INTEGER AS gpus_reporting,
    bool_and(p.complete) AND count(*) = any_value(e.n) AS complete,
    any_value(p.grid_step_ms) AS grid_step_ms,
    max(p.carried_ms)::INTEGER AS carried_ms,
    max(p.ahead_ms)::INTEGER AS ahead_ms
FROM parts AS p
JOIN expected AS e USING (level, entity)
GROUP BY p.level, p.entity, p.ts
