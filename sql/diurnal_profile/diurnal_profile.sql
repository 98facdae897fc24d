-- diurnal_profile: per role and inference endpoint, by local hour of day over the trailing
-- getvariable('diurnal_days') days (default 28) ending on the partition day, from
-- hourly_activity: mean power (W), p5/p95 of 1 s power (bins of 0.1% of provisioned, value =
-- bin centre), requests per second, prompt and output tokens per second, energy per output
-- token (J; the entity's energy in those hours ÷ output tokens of the requests arriving in
-- them), and how many days contributed. dow is null on the all-days rows; rows per day of week
-- (ISO: 1 = Monday … 7 = Sunday) appear once the window holds at least 7 days. The time zone is
-- getvariable('diurnal_tz') (default UTC); hours are UTC hours relabelled in that zone, exact
-- for zones a whole number of hours from UTC.
WITH days AS (
    SELECT *
    FROM hourly_activity
    WHERE date > getvariable('partition_date') - coalesce(getvariable('diurnal_days'), 28)::INTEGER
      AND date <= getvariable('partition_date')
),
keyed AS (
    SELECT
        *,
        hour(timezone(coalesce(getvariable('diurnal_tz'), 'UTC'), (date + to_hours(hour_utc))::TIMESTAMPTZ)) AS hour,
        isodow(timezone(coalesce(getvariable('diurnal_tz'), 'UTC'), (date + to_hours(hour_utc))::TIMESTAMPTZ)) AS dow
    FROM days
),
span AS (SELECT count(DISTINCT date) AS n FROM days),
totals AS (
    SELECT
        role, entity, dow, hour,
        sum(sum_w) / nullif(sum(seconds), 0) AS mean_w,
        sum(requests) / (3600.0 * count(*)) AS requests_per_s,
        sum(prompt_tokens) / (3600.0 * count(*)) AS prompt_tokens_per_s,
        sum(output_tokens) / (3600.0 * count(*)) AS output_tokens_per_s,
        sum(energy_j) FILTER (output_tokens > 0) / nullif(sum(output_tokens), 0) AS j_per_output_token,
        count(DISTINCT date) AS days
    FROM keyed
    GROUP BY GROUPING SETS ((role, entity, hour), (role, entity, dow, hour))
),
bins AS (
    SELECT role, entity, dow, hour, bin, sum(n) AS n, max(bin_w) AS bin_w
    FROM (
        SELECT role, entity, dow, hour, bin_w, unnest(map_keys(hist)) AS bin, unnest(map_values(hist)) AS n
        FROM keyed WHERE hist IS NOT NULL
    )
    GROUP BY GROUPING SETS ((role, entity, hour, bin), (role, entity, dow, hour, bin))
),
cumulative AS (
    SELECT
        *,
        sum(n) OVER (PARTITION BY role, entity, dow, hour ORDER BY bin ROWS UNBOUNDED PRECEDING) AS cum,
        sum(n) OVER (PARTITION BY role, entity, dow, hour) AS total
    FROM bins
),
pct AS (
    SELECT
        role, entity, dow, hour,
        (min(bin) FILTER (cum >= 0.05 * total) + 0.5) * max(bin_w) AS p5_w,
        (min(bin) FILTER (cum >= 0.95 * total) + 0.5) * max(bin_w) AS p95_w
    FROM cumulative
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    t.role,
    t.entity,
    t.dow::INTEGER AS dow,
    t.hour::INTEGER AS hour,
    t.mean_w::FLOAT AS mean_w,
    p.p5_w::FLOAT AS p5_w,
    p.p95_w::FLOAT AS p95_w,
    t.requests_per_s::FLOAT AS requests_per_s,
    t.prompt_tokens_per_s::FLOAT AS prompt_tokens_per_s,
    t.output_tokens_per_s::FLOAT AS output_tokens_per_s,
    t.j_per_output_token::FLOAT AS j_per_output_token,
    t.days::INTEGER AS days
FROM totals AS t
LEFT JOIN pct AS p ON p.role = t.role AND p.entity = t.entity AND p.hour = t.hour AND p.dow IS NOT DISTINCT FROM t.dow
WHERE t.dow IS NULL OR (SELECT n FROM span) >= 7
ORDER BY t.role, t.entity, t.dow NULLS FIRST, t.hour
