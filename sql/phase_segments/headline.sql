SELECT map_from_entries(list((k, {'n': n, 'n_endpoint': ne, 'mean_w': w, 'above_tdp': a}) ORDER BY k)) AS segments
FROM (
    SELECT source || ':' || phase AS k, count(*) AS n, count(DISTINCT (endpoint, endpoint_segment)) AS ne, round(avg(mean_w)::DOUBLE, 1) AS w, count(*) FILTER (WHERE above_tdp) AS a
    FROM phase_segments WHERE date = getvariable('partition_date') GROUP BY ALL
)
