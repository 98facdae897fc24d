-- severity: WARN
-- description: Day mean of each entity's complete bins agrees with its complete 100 ms slots in fleet_power_100ms within 1% (different incomplete stretches make them differ).
-- failure: {n} entit(y/ies) whose grid mean differs from fleet_power_100ms by > 1%
WITH a AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_grid
           WHERE date = getvariable('partition_date') AND complete GROUP BY ALL),
     b AS (SELECT level, entity, avg(power_w) AS w FROM fleet_power_100ms
           WHERE date = getvariable('partition_date') AND complete GROUP BY ALL)
SELECT level || ':' || entity, a.w, b.w FROM a JOIN b USING (level, entity)
WHERE abs(a.w - b.w) > 0.01 * greatest(b.w, 1) ORDER BY 1
