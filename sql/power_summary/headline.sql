SELECT map_from_entries(list((level || ':' || entity, round(max_pct::DOUBLE, 1)) ORDER BY level || ':' || entity)) AS peak_pct_of_provisioned,
       map_from_entries(list((level || ':' || entity, round(peak_to_avg::DOUBLE, 2)) ORDER BY level || ':' || entity)) AS peak_to_avg,
       map_from_entries(list((level || ':' || entity, round(energy_kwh::DOUBLE, 2)) ORDER BY level || ':' || entity)) AS energy_kwh
FROM power_summary
WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role', 'fleet')
