SELECT count(DISTINCT (host, gpu)) AS gpus,
       round(coalesce(sum(energy_j), 0) / 3.6e6, 3) AS energy_kwh,
       coalesce(string_agg(DISTINCT source, ', '), '') AS sources,
       len(getvariable('files_power')) AS files_used
FROM power_1s WHERE date = getvariable('partition_date')
