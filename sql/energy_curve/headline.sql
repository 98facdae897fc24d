SELECT count(*) AS gpus, round(coalesce(sum(j), 0) / 3.6e6, 4) AS energy_kwh
FROM (SELECT max(end_energy_j) AS j FROM energy_curve WHERE date = getvariable('partition_date') GROUP BY host, gpu)
