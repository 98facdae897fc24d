-- Traces the swing, headroom and correlation queries share, built on the 100 ms grid.
-- Macros take the tables they read by name (query_table): DuckDB binds a macro's tables when it
-- is created, and derived tables such as power_100ms may not exist yet when the views load.
--
-- The carry rule: a GPU's empty slot takes the value of the last slot before it, at most one
-- step; a longer gap stays empty (windows over it are incomplete and excluded). A source slower
-- than the grid (nvidia-smi at 250 ms) leaves slots empty by design, not by losing samples: its
-- value is carried up to its own sampling interval (the 90th percentile of its slot spacing in
-- that minute, less one). Only minutes with an empty slot are examined, so a regular 10 Hz trace
-- costs one count per GPU-minute.

-- grid is read twice, not materialized: a materialized CTE held every 100 ms row of the day
-- (~375 MB at 8 GPUs x 24 h) for a result of a few thousand rows, and cost more CPU than the scans.
CREATE OR REPLACE MACRO gpu_grid_carried(grid_table) AS TABLE
WITH grid AS NOT MATERIALIZED (
    SELECT host, gpu, slot_100ms(ts) AS slot, CASE WHEN is_average THEN NULL ELSE power_w END AS power_w, power_avg_w
    FROM query_table(grid_table)
    WHERE date = getvariable('partition_date')
),
gappy AS (
    SELECT host, gpu, slot // 600 AS minute
    FROM grid
    GROUP BY ALL
    HAVING count(*) < 600
),
near AS (
    SELECT g.*
    FROM grid AS g
    SEMI JOIN (SELECT host, gpu, minute FROM gappy UNION SELECT host, gpu, minute - 1 FROM gappy) AS m
        ON g.host = m.host AND g.gpu = m.gpu AND g.slot // 600 = m.minute
),
ends AS (
    SELECT *, lead(slot) OVER (PARTITION BY host, gpu ORDER BY slot) AS next_slot
    FROM near
),
cadence AS (
    SELECT host, gpu, slot // 600 AS minute, greatest(1, quantile_disc(next_slot - slot, 0.9) - 1) AS reach
    FROM ends
    WHERE next_slot IS NOT NULL
    GROUP BY ALL
),
carried AS (
    SELECT e.host, e.gpu, e.slot + unnest(range(1, 1 + least(coalesce(e.next_slot - e.slot - 1, 1), coalesce(c.reach, 1)))) AS slot,
           e.power_w, e.power_avg_w, e.slot AS from_slot
    FROM ends AS e
    LEFT JOIN cadence AS c ON c.host = e.host AND c.gpu = e.gpu AND c.minute = e.slot // 600
    WHERE e.next_slot IS NULL OR e.next_slot > e.slot + 1
)
SELECT c.host, c.gpu, c.slot, c.power_w, c.power_avg_w, c.from_slot
FROM carried AS c
SEMI JOIN gappy AS m ON c.host = m.host AND c.gpu = m.gpu AND c.slot // 600 = m.minute
WHERE c.slot < slot_100ms(day_end());

-- Each GPU's trace on the grid (slot = 100 ms index since the epoch) with empty slots filled
-- from carried_table (the rows of gpu_grid_carried, usually kept in a temp table). power_w is
-- the instantaneous value only: null where the GPU's best source is a 1 s average. from_slot:
-- the slot whose samples gave the value (the slot itself unless carried), so a window can leave
-- out a value sampled before it starts (the swings do: a carried value must not widen a window).
CREATE OR REPLACE MACRO gpu_grid_day(grid_table, carried_table) AS TABLE
SELECT host, gpu, slot_100ms(ts) AS slot, CASE WHEN is_average THEN NULL ELSE power_w END AS power_w, power_avg_w, false AS carried,
       slot_100ms(ts) AS from_slot
FROM query_table(grid_table)
WHERE date = getvariable('partition_date')
UNION ALL
SELECT host, gpu, slot, power_w, power_avg_w, true AS carried, from_slot
FROM query_table(carried_table);

-- The day's reporting GPUs with their place in the fleet (GPUs missing from the inventory are
-- left out of every sum; power_1s's gpus_in_inventory check names them).
CREATE OR REPLACE MACRO reporting_gpus(grid_table) AS TABLE
SELECT i.*
FROM (SELECT DISTINCT host, gpu FROM query_table(grid_table) WHERE date = getvariable('partition_date')) AS r
JOIN inventory_gpus AS i USING (host, gpu);
