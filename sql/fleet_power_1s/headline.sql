SELECT map_from_entries(list((level || ':' || entity, round(p::DOUBLE, 1)) ORDER BY level, entity)) AS peak_pct_of_provisioned
FROM (SELECT level, entity, max(power_pct) AS p FROM fleet_power_1s
      WHERE date = getvariable('partition_date') AND level IN ('role', 'fleet', 'cluster') GROUP BY ALL)
