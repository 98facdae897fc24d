-- power_1s: per GPU and second of the partition day, from the GPU's best source (view power_day):
-- mean/min/max power, energy by trapezoid integration of the samples (a segment is credited to
-- the second its later sample falls in; segments longer than 2 s are gaps and not integrated),
-- sample count, whether a gap precedes the second, and repeated timestamps (duplicates).
-- A test oracle (it runs as-is in the DuckDB CLI): production writes power_1s with the series
-- engine only (pipeline/series/registry.py power_1s_rows); tests/test_power_kernels.py holds the
-- engine's rows to this file's.
WITH samples AS (
    SELECT
        host,
        gpu,
        t_ns,
        power_w,
        source,
        is_average,
        bucket_ns(t_ns, 1000000000) AS second_ns,
        (t_ns - lag(t_ns) OVER w) / 1e9 AS dt_s,
        lag(power_w) OVER w AS prev_w
    FROM power_day
    WINDOW w AS (PARTITION BY host, gpu ORDER BY t_ns)
)
SELECT
    getvariable('partition_date') AS date,
    host,
    gpu,
    ns_to_ts(second_ns) AS ts,
    avg(power_w)::FLOAT AS mean_w,
    min(power_w)::FLOAT AS min_w,
    max(power_w)::FLOAT AS max_w,
    xsum(CASE WHEN dt_s <= 2.0 THEN (power_w + prev_w) / 2 * dt_s ELSE 0 END) AS energy_j,  -- exact: reruns are bit-identical
    count(*)::INTEGER AS samples,
    bool_or(dt_s IS NULL OR dt_s > 2.0) AS gap_before,
    count(*) FILTER (WHERE dt_s = 0)::INTEGER AS duplicate_samples,
    any_value(source) AS source,
    bool_or(is_average) AS is_average
FROM samples
GROUP BY host, gpu, second_ns
ORDER BY host, gpu, ts
