SELECT map_from_entries(list((level || ':' || entity || ' ' || series, round(max_swing_pct::DOUBLE, 1)) ORDER BY level || ':' || entity || ' ' || series)) AS max_2s_swing_pct
FROM swing_stats
WHERE date = getvariable('partition_date') AND window_s = 2 AND level IN ('cluster', 'role', 'fleet')
