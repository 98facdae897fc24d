SELECT map_from_entries(list((kind || ' ' || entity || ' at ' || gpus || ' GPUs', round(max_2s_swing_pct, 1)))) AS max_2s_swing_pct_at_published_scale
FROM swing_projection
WHERE date = getvariable('partition_date') AND published_scale
