-- hourly_activity: the day reduced to what the diurnal profile needs, per role and inference
-- endpoint and UTC hour: seconds with complete power, summed power (for the mean), energy (J,
-- trapezoid-integrated), a histogram of 1 s power in bins of 0.1% of the entity's provisioned
-- power (role) or TDP sum (endpoint) for the percentiles, and requests arriving in that hour with
-- their prompt and output tokens. Small (24 rows per entity and day), so diurnal_profile can
-- read weeks of it.
-- an endpoint's GPUs are those it held at each second (held_gpus: a GPU that changes hands counts
-- for each endpoint only while it held it); a second is complete when every GPU held then reports
WITH held AS (
    SELECT name AS endpoint, host, gpu, role, tdp_w, from_ns, to_ns FROM held_gpus('endpoint')
),
endpoints AS (
    SELECT endpoint, any_value(role) AS role, sum(tdp_w) AS scale_w
    FROM (SELECT DISTINCT endpoint, host, gpu, role, tdp_w FROM held) GROUP BY ALL
),
seconds AS (
    SELECT e.role, e.endpoint AS entity, p.ts, sum(p.mean_w) AS power_w, sum(p.energy_j) AS energy_j,
           count(*) = gpus_held_at('endpoint', e.endpoint, epoch_ns(p.ts)) AS complete, any_value(e.scale_w) AS scale_w
    FROM power_1s AS p
    JOIN held AS g ON g.host = p.host AND g.gpu = p.gpu AND epoch_ns(p.ts) >= g.from_ns AND epoch_ns(p.ts) < g.to_ns
    JOIN endpoints AS e ON e.endpoint = g.endpoint
    WHERE p.date = getvariable('partition_date')
    GROUP BY e.role, e.endpoint, p.ts
    UNION ALL
    SELECT f.entity, f.entity, f.ts, f.power_w, f.energy_j, f.gpus_reporting = f.gpus_total, f.provisioned_w
    FROM fleet_power_1s AS f
    WHERE f.date = getvariable('partition_date') AND f.level = 'role'
),
power_hours AS (
    SELECT
        role, entity, hour(ts) AS hour_utc,
        count(*) FILTER (complete) AS seconds,
        round(sum(power_w) FILTER (complete), 6) AS sum_w,  -- rounded: parallel sums may differ in the last bit
        round(sum(energy_j), 6) AS energy_j,
        any_value(scale_w) / 1000 AS bin_w,
        map_from_entries(list_sort(map_entries(histogram(floor(power_w / (scale_w / 1000))::INTEGER) FILTER (complete)))) AS hist
    FROM seconds
    GROUP BY ALL
),
request_hours AS (
    SELECT e.role, r.endpoint AS entity, hour(r.arrival_ts) AS hour_utc, count(*) AS requests,
           sum(r.prompt_tokens) AS prompt_tokens, sum(r.output_tokens) AS output_tokens
    FROM requests AS r
    JOIN endpoints AS e ON e.endpoint = r.endpoint
    WHERE r.date = getvariable('partition_date')
    GROUP BY ALL
),
request_rows AS (
    SELECT * FROM request_hours
    UNION ALL
    SELECT role, role, hour_utc, sum(requests), sum(prompt_tokens), sum(output_tokens) FROM request_hours GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    coalesce(p.role, q.role) AS role,
    coalesce(p.entity, q.entity) AS entity,
    coalesce(p.hour_utc, q.hour_utc)::INTEGER AS hour_utc,
    coalesce(p.seconds, 0) AS seconds,
    p.sum_w,
    p.energy_j,
    p.bin_w,
    p.hist,
    coalesce(q.requests, 0) AS requests,
    coalesce(q.prompt_tokens, 0) AS prompt_tokens,
    coalesce(q.output_tokens, 0) AS output_tokens
FROM power_hours AS p
FULL JOIN request_rows AS q USING (role, entity, hour_utc)
ORDER BY role, entity, hour_utc
