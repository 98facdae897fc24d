SELECT count(DISTINCT (host, gpu)) AS gpus, count(*) AS slots,
       coalesce(string_agg(DISTINCT source, ', '), '') AS sources,
       round(coalesce(avg((power_avg_w IS NOT NULL)::INT), 0), 3) AS share_with_driver_avg
FROM power_100ms WHERE date = getvariable('partition_date')
