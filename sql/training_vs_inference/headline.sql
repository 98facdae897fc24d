SELECT map_from_entries(list((role, round(max_2s_swing_pct::DOUBLE, 1)) ORDER BY role)) AS max_2s_swing_pct,
       map_from_entries(list((role, round(reference_max_2s_swing_pct::DOUBLE, 1)) ORDER BY role)) AS reference_max_2s_swing_pct,
       map_from_entries(list((role, round(peak_pct::DOUBLE, 1)) ORDER BY role)) AS peak_pct
FROM training_vs_inference
WHERE date = getvariable('partition_date')
