-- Shared by every power query: each GPU's trace for the partition day (getvariable('partition_date')),
-- built from its single best source in each minute: nvml-buffer > nvml-field/simulated > nvidia-smi
-- instant > any 1 s average. Rows outside the day's [00:00, 24:00) UTC are left out here and
-- reported by the power_1s checks.

CREATE OR REPLACE MACRO source_rank(source, is_average) AS
    CASE
        WHEN is_average THEN 9
        WHEN source = 'nvml-buffer' THEN 1
        WHEN source IN ('nvml-field', 'simulated') THEN 2
        WHEN source = 'nvidia-smi' THEN 3
        ELSE 5
    END;

CREATE OR REPLACE MACRO day_start() AS getvariable('partition_date')::DATE::TIMESTAMPTZ;

CREATE OR REPLACE MACRO day_end() AS (getvariable('partition_date')::DATE + INTERVAL 1 DAY)::TIMESTAMPTZ;

-- Bucketing on integer nanoseconds is 2-3x faster than time_bucket() on TIMESTAMPTZ (which goes
-- through ICU); convert back to a timestamp only on reduced rows.
CREATE OR REPLACE MACRO bucket_ns(t_ns, width_ns) AS t_ns // width_ns * width_ns;

CREATE OR REPLACE MACRO ns_to_ts(t_ns) AS make_timestamp_ns(t_ns)::TIMESTAMPTZ;

CREATE OR REPLACE VIEW power_day_samples AS
SELECT
    ts,
    epoch_ns(ts) AS t_ns,
    host,
    gpu,
    source::VARCHAR AS source,
    coalesce(power_w, power_avg_w) AS power_w,
    power_w IS NULL AS is_average,
    source_rank(source::VARCHAR, power_w IS NULL) AS source_rank,
    bucket_ns(epoch_ns(ts), 60000000000) AS minute_ns
FROM power
WHERE date = getvariable('partition_date')
  AND ts >= day_start() AND ts < day_end()
  AND coalesce(power_w, power_avg_w) IS NOT NULL;

CREATE OR REPLACE VIEW power_day AS
WITH best AS (
    SELECT host, gpu, minute_ns, min(source_rank) AS source_rank
    FROM power_day_samples
    GROUP BY ALL
)
SELECT s.ts, s.t_ns, s.host, s.gpu, s.power_w, s.source, s.is_average
FROM power_day_samples AS s
JOIN best USING (host, gpu, minute_ns, source_rank);
