-- fleet_power_1s, fleet-day part: per second, the role and fleet rows, summed from the
-- cluster-days' parts (a role = its cluster_role parts, a fleet = its clusters), with the
-- domain's GPU count and provisioned power from the inventory. Reads no per-GPU data.
WITH parts AS (
    SELECT ts, 'role' AS level, part_role(entity) AS entity, power_w, energy_j, gpus_reporting
    FROM fleet_power_1s
    WHERE date = getvariable('partition_date') AND level = 'cluster_role'
    UNION ALL
    SELECT f.ts, 'fleet', c.fleet, f.power_w, f.energy_j, f.gpus_reporting
    FROM fleet_power_1s AS f
    JOIN cluster_fleet AS c ON c.cluster = f.entity
    WHERE f.date = getvariable('partition_date') AND f.level = 'cluster'
),
summed AS (
    SELECT ts, level, entity, sum(power_w) AS power_w, sum(energy_j) AS energy_j, sum(gpus_reporting)::INTEGER AS gpus_reporting
    FROM parts
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    s.level,
    s.entity,
    s.ts,
    s.power_w::FLOAT AS power_w,
    s.energy_j,
    s.gpus_reporting,
    e.gpus AS gpus_total,
    e.provisioned_w,
    (100 * s.power_w / e.provisioned_w)::FLOAT AS power_pct
FROM summed AS s
JOIN inventory_entities AS e USING (level, entity)
ORDER BY s.level, s.entity, s.ts
