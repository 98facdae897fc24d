SELECT map_from_entries(list((cluster_a || ' ~ ' || cluster_b, round(pearson_1s::DOUBLE, 3)) ORDER BY cluster_a || ' ~ ' || cluster_b)) AS pearson_1s
FROM cluster_correlation
WHERE date = getvariable('partition_date') AND cluster_a < cluster_b
