-- severity: WARN
-- description: Day mean of each entity's 100 ms sum agrees with fleet_power_1s within 1% (partial GPUs make them differ).
-- failure: {n} entit(y/ies) whose 100 ms mean differs from fleet_power_1s by > 1%
WITH a AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_100ms
           WHERE date = getvariable('partition_date') AND complete GROUP BY ALL),
     b AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_1s
           WHERE date = getvariable('partition_date') AND gpus_reporting = gpus_total GROUP BY ALL)
SELECT level || ':' || entity, a.w, b.w FROM a JOIN b USING (level, entity)
WHERE abs(a.w - b.w) > 0.01 * greatest(b.w, 1) ORDER BY 1
