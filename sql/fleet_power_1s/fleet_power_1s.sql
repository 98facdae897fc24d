-- fleet_power_1s: per second, the summed power of each host, cluster, role and fleet
-- (GPUs joined to the inventory; a GPU missing from the inventory is reported by a check),
-- with the domain's provisioned power and how many of its GPUs reported that second.
CREATE OR REPLACE TEMP TABLE _summed AS
WITH gpu_seconds AS (
    SELECT p.ts, p.mean_w, p.energy_j, i.fleet, i.cluster, i.host, i.role
    FROM power_1s AS p
    JOIN inventory_gpus AS i USING (host, gpu)
    WHERE p.date = getvariable('partition_date')
)
SELECT
    ts,
    CASE
        WHEN grouping(host) = 0 THEN 'host'
        WHEN grouping(cluster) = 0 THEN 'cluster'
        WHEN grouping(role) = 0 THEN 'role'
        ELSE 'fleet'
    END AS level,
    coalesce(host, cluster, role, fleet) AS entity,
    sum(mean_w) AS power_w,
    sum(energy_j) AS energy_j,
    count(*) AS gpus_reporting
FROM gpu_seconds
GROUP BY GROUPING SETS ((ts, fleet, cluster, host), (ts, fleet, cluster), (ts, fleet, role), (ts, fleet));

FROM fleet_power_1s_rows('_summed')
