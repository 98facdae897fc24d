-- fleet_power_100ms, fleet-day part: per 100 ms slot, the role and fleet rows summed from the
-- cluster-days' parts (cluster_role parts for a role, cluster rows for the fleet). A slot is
-- complete when every part that reports this day is there and complete (complete_avg1s and
-- complete_best likewise);
-- power_avg_w is null unless every part carries one; carried_ms the largest of the parts'.
-- Reads no per-GPU data.
WITH parts AS (
    FROM cluster_parts('fleet_power_100ms')
),
expected AS (
    SELECT level, entity, count(DISTINCT part) AS n FROM parts GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    p.level,
    p.entity,
    p.ts,
    sum(p.power_w)::FLOAT AS power_w,
    (CASE WHEN count(p.power_avg_w) = count(*) THEN sum(p.power_avg_w) END)::FLOAT AS power_avg_w,
    sum(p.gpus_reporting)::INTEGER AS gpus_reporting,
    bool_and(p.complete) AND count(*) = any_value(e.n) AS complete,
    bool_and(p.complete_avg1s) AND count(*) = any_value(e.n) AS complete_avg1s,
    max(p.carried_ms)::INTEGER AS carried_ms,
    sum(p.power_best_w)::FLOAT AS power_best_w,
    bool_and(p.complete_best) AND count(*) = any_value(e.n) AS complete_best
FROM parts AS p
JOIN expected AS e USING (level, entity)
GROUP BY p.level, p.entity, p.ts
ORDER BY p.level, p.entity, p.ts
