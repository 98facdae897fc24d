-- diurnal_profile's materialization metadata: peak hours per entity, days in the window
WITH e AS (
    SELECT entity, arg_max(hour, requests_per_s) AS request_hour, arg_max(hour, mean_w) AS power_hour, max(days) AS days
    FROM diurnal_profile WHERE date = getvariable('partition_date') AND dow IS NULL GROUP BY entity
)
SELECT map_from_entries(list((entity, request_hour) ORDER BY entity)) AS peak_request_hour,
       map_from_entries(list((entity, power_hour) ORDER BY entity)) AS peak_power_hour,
       coalesce(max(days), 0) AS days_in_window
FROM e
