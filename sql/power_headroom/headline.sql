SELECT map_from_entries(list((entity, round(headroom_pct::DOUBLE, 1)) ORDER BY entity)) AS cluster_headroom_pct,
       map_from_entries(list((entity, round(extra_hosts_estimate::DOUBLE, 0)) ORDER BY entity)) AS cluster_extra_hosts_estimate
FROM power_headroom
WHERE date = getvariable('partition_date') AND level = 'cluster'
