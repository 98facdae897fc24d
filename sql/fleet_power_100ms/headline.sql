SELECT map_from_entries(list((e, round(w::DOUBLE, 0)) ORDER BY e)) AS peak_100ms_w
FROM (SELECT level || ':' || entity AS e, max(power_w) AS w FROM fleet_power_100ms
      WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role', 'fleet') AND complete GROUP BY ALL)
