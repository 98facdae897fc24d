SELECT map_from_entries(list((level || ':' || entity, round(coincidence_factor::DOUBLE, 3)) ORDER BY level || ':' || entity)) AS coincidence_factor
FROM coincidence
WHERE date = getvariable('partition_date') AND level IN ('cluster', 'role')
