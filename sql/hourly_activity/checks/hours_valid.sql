-- severity: ERROR
-- description: Hours within 0–23 with at most 3,600 seconds each.
-- rollup: no
SELECT entity, hour_utc, seconds FROM hourly_activity
WHERE date = getvariable('partition_date') AND (hour_utc NOT BETWEEN 0 AND 23 OR seconds > 3600)
