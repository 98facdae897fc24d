-- power_100ms: each GPU's trace on the 100 ms grid, from its best source per minute (as view
-- power_day: nvml-buffer > nvml-field/simulated > nvidia-smi instant > any 1 s average).
-- power_w is the mean of the best-source instantaneous samples whose ts falls in the slot
-- [ts, ts + 100 ms); power_avg_w the mean of the driver's 1 s average carried by the same rows,
-- or, where that source carries none, by the best source of the GPU that does (null when none does); samples counts them; is_average marks a GPU whose best source
-- that minute is itself a 1 s average (power_w is then that average, not an instantaneous
-- reading, and the swing analytics treat its instantaneous value as unknown). One row per slot that has a sample:
-- empty slots are absent (consumers decide how far to carry a value forward).
--
-- How it stays cheap: at 10 Hz nearly every slot holds exactly one sample, so a hash aggregation
-- with one group per slot (as many groups as samples) is mostly wasted. One window pass per GPU
-- (sorted by time) marks the samples that share their slot with a neighbour; only those are
-- aggregated, the rest pass through. The GPU and the slot travel as one integer key (GPU number
-- × 2^20 + slot of the day; a day has 864 000 slots) and the source as a number, so the sorts
-- (which spill at scale under the memory limit) move narrow fixed-width rows; host, gpu and
-- source are looked up from the day's lists after the final sort (a projection keeps its order).
-- A test oracle (it runs as-is in the DuckDB CLI): production writes power_100ms with the series
-- engine only (pipeline/series/registry.py power_100ms_rows); tests/test_power_kernels.py holds the
-- engine's rows to this file's.

-- Each GPU-minute's sources, read once: their rank and whether they carry the driver's 1 s average.
CREATE OR REPLACE TEMP TABLE _grid_minute_sources AS
SELECT host, gpu, minute_ns, source_rank, source, bool_or(power_avg_w IS NOT NULL) AS has_avg
FROM power_day_samples
GROUP BY ALL;

-- Each GPU-minute's best source (lowest rank), numbered: gk = the GPU's place in (host, gpu)
-- order, sk = the source's place in the day's sources.
CREATE OR REPLACE TEMP TABLE _grid_keys AS
WITH m AS (
    SELECT host, gpu, minute_ns, source_rank, source
    FROM _grid_minute_sources
    QUALIFY source_rank = min(source_rank) OVER (PARTITION BY host, gpu, minute_ns)
)
SELECT *, dense_rank() OVER (ORDER BY host, gpu) AS gk, dense_rank() OVER (ORDER BY source)::INTEGER AS sk
FROM m;

-- The driver's 1 s average from another source where the best instant source carries none (the
-- collector's nvml-buffer rows have no average; its nvml-field rows do): per slot, the mean
-- power_avg_w of the best-ranked source that reports one in that GPU-minute.
CREATE OR REPLACE TEMP TABLE _grid_avg AS
WITH m AS (
    SELECT host, gpu, minute_ns, min(source_rank) AS source_rank
    FROM _grid_minute_sources WHERE has_avg
    GROUP BY ALL
)
SELECT k.gk * 1048576 + (s.t_ns // 100000000 - day_first_slot()) AS key, avg(s.power_avg_w)::FLOAT AS power_avg_w
FROM power_day_samples AS s
JOIN m ON s.host = m.host AND s.gpu = m.gpu AND s.minute_ns = m.minute_ns AND s.source_rank = m.source_rank
JOIN _grid_keys AS k ON s.host = k.host AND s.gpu = k.gpu AND s.minute_ns = k.minute_ns
WHERE s.power_avg_w IS NOT NULL AND s.source IS DISTINCT FROM k.source
GROUP BY ALL;

SET VARIABLE _grid_hosts = (SELECT coalesce(list(host ORDER BY gk), []) FROM (SELECT DISTINCT gk, host FROM _grid_keys));

SET VARIABLE _grid_gpus = (SELECT coalesce(list(gpu ORDER BY gk), []) FROM (SELECT DISTINCT gk, gpu FROM _grid_keys));

SET VARIABLE _grid_sources = (SELECT coalesce(list(source ORDER BY sk), []) FROM (SELECT DISTINCT sk, source FROM _grid_keys));

WITH s AS MATERIALIZED (  -- a slot shared by several samples is aggregated; the rest (at 10 Hz: nearly all) pass through
    SELECT key, power_w, sk, power_avg_w, is_average,
           coalesce(key = lag(key) OVER w OR key = lead(key) OVER w, false) AS shared
    FROM (
        SELECT k.gk, k.gk * 1048576 + (s.t_ns // 100000000 - day_first_slot()) AS key, s.t_ns,
               s.power_w, k.sk, s.power_avg_w, s.is_average
        FROM power_day_samples AS s
        JOIN _grid_keys AS k
          ON s.host = k.host AND s.gpu = k.gpu AND s.minute_ns = k.minute_ns AND s.source_rank = k.source_rank
         AND s.source IS NOT DISTINCT FROM k.source
    )
    WINDOW w AS (PARTITION BY gk ORDER BY t_ns)
)
SELECT
    getvariable('partition_date') AS date,
    getvariable('_grid_hosts')[key // 1048576] AS host,
    getvariable('_grid_gpus')[key // 1048576] AS gpu,
    slot_ts(day_first_slot() + key % 1048576) AS ts,
    power_w,
    samples,
    getvariable('_grid_sources')[sk] AS source,
    power_avg_w,
    is_average
FROM (
    SELECT g.key, g.power_w, g.samples, g.sk, coalesce(g.power_avg_w, a.power_avg_w) AS power_avg_w, g.is_average
    FROM (
        SELECT key, power_w, 1 AS samples, sk, power_avg_w, is_average
        FROM s WHERE NOT shared
        UNION ALL
        SELECT key, avg(power_w)::FLOAT, count(*)::INTEGER, any_value(sk), avg(power_avg_w)::FLOAT, bool_or(is_average)
        FROM s WHERE shared
        GROUP BY key
    ) AS g
    LEFT JOIN _grid_avg AS a USING (key)
    ORDER BY g.key
)
