SELECT map_from_entries(list((k, {'n': n, 'mean_w': w, 'above_tdp': a}) ORDER BY k)) AS segments
FROM (
    SELECT source || ':' || phase AS k, count(*) AS n, round(avg(mean_w)::DOUBLE, 1) AS w, count(*) FILTER (WHERE above_tdp) AS a
    FROM phase_segments WHERE date = getvariable('partition_date') GROUP BY ALL
)
