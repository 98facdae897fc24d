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
),
sums AS (
    SELECT
        level,
        entity,
        ts,
        sum(power_w) AS power_w,
        CASE WHEN bool_and(power_avg_w IS NOT NULL) THEN sum(power_avg_w) END AS power_avg_w,
        sum(gpus_reporting) AS gpus_reporting,
        bool_and(complete) AS all_complete,
        bool_and(complete_avg1s) AS all_complete_avg1s,
        max(carried_ms) AS carried_ms,
        sum(power_best_w) AS power_best_w,
        bool_and(complete_best) AS all_complete_best,
        count(*) AS parts
    FROM parts
    GROUP BY level, entity, ts
)
SELECT
    getvariable('partition_date') AS date,
    s.level,
    s.entity,
    s.ts,
    s.power_w::FLOAT AS power_w,
    s.power_avg_w::FLOAT AS power_avg_w,
    s.gpus_reporting::INTEGER AS gpus_reporting,
    s.all_complete AND s.parts = e.n AS complete,
    s.all_complete_avg1s AND s.parts = e.n AS complete_avg1s,
    s.carried_ms::INTEGER AS carried_ms,
    s.power_best_w::FLOAT AS power_best_w,
    s.all_complete_best AND s.parts = e.n AS complete_best
FROM sums AS s
JOIN expected AS e USING (level, entity)
ORDER BY s.level, s.entity, s.ts
