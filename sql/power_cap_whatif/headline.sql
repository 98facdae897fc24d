SELECT map_from_entries(list((level || ':' || entity || ' @' || cap_factor, {
           'energy_above_cap_j': round(energy_above_cap_j), 'time_above_share': round(time_above_share, 4),
           'est_energy_change_pct': round(est_energy_change_pct, 2), 'est_duration_change_pct': round(est_duration_change_pct, 2)})
           ORDER BY level, entity, cap_factor DESC)) AS by_entity_and_cap
FROM power_cap_whatif
WHERE date = getvariable('partition_date') AND phase = 'all' AND level IN ('endpoint', 'job', 'cluster')
