-- power_100ms: each GPU's trace on the 100 ms grid (view power_day: its best source per minute).
-- power_w is the mean of the best-source instantaneous samples whose ts falls in the slot
-- [ts, ts + 100 ms); power_avg_w the mean of the driver's 1 s average carried by the same rows
-- (null when the source has none); samples counts them; is_average marks a GPU whose best source
-- that minute is itself a 1 s average (power_w is then that average, not an instantaneous
-- reading, and the swing analytics treat its instantaneous value as unknown). One row per slot that has a sample:
-- empty slots are absent (consumers decide how far to carry a value forward).
SELECT
    getvariable('partition_date') AS date,
    host,
    gpu,
    slot_ts(slot) AS ts,
    power_w::FLOAT AS power_w,
    samples::INTEGER AS samples,
    source,
    power_avg_w::FLOAT AS power_avg_w,
    is_average
FROM (
    SELECT
        host,
        gpu,
        t_ns // 100000000 AS slot,
        avg(power_w) AS power_w,
        count(*) AS samples,
        any_value(source) AS source,
        avg(power_avg_w) AS power_avg_w,
        bool_or(is_average) AS is_average
    FROM power_day
    GROUP BY ALL
)
ORDER BY host, gpu, ts
