-- swing_stats, the test oracle: per level (gpu, host, cluster, role, fleet), entity, window
-- W ∈ {1, 2, 10, 60} s and series (instant = the grid of instantaneous power; avg1s = the driver's
-- 1 s average on the 100 ms grid, where any source of the GPU reports one): the largest max − min
-- inside any W-long window of the day (here, for every level, sliding slot by slot on the 100 ms
-- grid, exact), the p50/p99 of the swing over the day's aligned W-long windows, the largest ramp
-- between consecutive slots (W/s) and how many aligned windows swing more than 10% / 25% of the
-- entity's provisioned power. Windows with an incomplete slot are excluded. A window leaves out a
-- slot whose value was carried from before the window starts (the carry rule of sparse sources,
-- sql/views/power_series.sql), so carrying never widens a window: a one-GPU host swings no more
-- than its GPU. The avg1s series of host and above is complete where every reporting GPU has a
-- 1 s average (complete_avg1s), so a host of GPUs whose best source is a 1 s average has avg1s
-- rows though its instant series has none; windows shorter than two of its sampling steps are left
-- out there (_coarse_upper), as they are for dcgm GPUs. An entity complete in neither series all
-- day (its GPUs mix an instantaneous source and a 1 s-average one) is swung on each GPU's best
-- value instead (power_best_w, complete_best), marked mixed. Run it at the default grid step: SET
-- VARIABLE grid_step_ms = 100 first (at another step the instant rows of host and above come from
-- fleet_power_grid, which this file does not read).
--
-- It runs as-is in the DuckDB CLI. Production writes swing_stats with the kernels of
-- pipeline/assets/swing_stats.py only (a Python table: GPU rows with max_swing_w on the raw
-- samples, exact over sample times, where DuckDB's RANGE windows cost ~200x more; the other
-- levels by polars rolling windows over each entity's dense day series). tests/test_power_swings.py
-- holds the kernels' rows to this file's (every column; for GPUs all but the max swing).
--
-- How it stays cheap: the slots are read once into 1 s blocks (the ten values side by side, so
-- every 100 ms step is a column difference). Aligned W-windows come from the blocks. A sliding
-- window that starts in aligned window w lies inside w and w + 1, so it can beat the best
-- aligned window only if the pair's joint range does; only those few pairs are re-read at
-- 100 ms and slid exactly.

-- GPU rows here: not at a fleet-day rollup (it swings only the role and fleet series).
CREATE OR REPLACE TEMP MACRO gpu_swings_here() AS getvariable('scope') IS DISTINCT FROM 'fleet';

CREATE OR REPLACE TEMP TABLE _carried AS FROM gpu_grid_carried('power_100ms') WHERE gpu_swings_here();

-- GPUs whose power comes from dcgm-exporter through Prometheus (source 'dcgm'): rows a sampling
-- step apart (the median gap of their slots, in s). A window shorter than two steps holds at most
-- one change of a 1 s average, which is not a swing: such windows are left out for those GPUs.
CREATE OR REPLACE TEMP TABLE _coarse AS
SELECT host AS entity, gpu::INTEGER AS gpu, quantile_disc(gap, 0.5) / 10.0 AS step_s
FROM (
    SELECT host, gpu, slot_100ms(ts) - lag(slot_100ms(ts)) OVER (PARTITION BY host, gpu ORDER BY ts) AS gap
    FROM power_100ms
    WHERE date = getvariable('partition_date') AND source = 'dcgm' AND gpu_swings_here()
)
WHERE gap IS NOT NULL
GROUP BY ALL;

-- Every series at every level, one row per slot, in double precision (differences of the stored
-- float32 watts are taken exactly); p / pa are null where the slot is incomplete in that series
-- (p of host and above also at a grid step other than 100 ms); age: how many slots back the
-- oldest value was sampled; pa_series: what pa holds ('avg1s', or 'mixed' for an entity complete
-- in neither series all day).
CREATE OR REPLACE TEMP VIEW _slots AS
SELECT 'gpu' AS level, host AS entity, gpu::INTEGER AS gpu, slot, power_w::DOUBLE AS p, power_avg_w::DOUBLE AS pa,
       slot - from_slot AS age, 'avg1s' AS pa_series
FROM gpu_grid_day('power_100ms', '_carried')
WHERE gpu_swings_here()
UNION ALL
SELECT level, entity, -1 AS gpu, slot,
       CASE WHEN complete AND getvariable('grid_step_ms') = 100 THEN power_w::DOUBLE END,
       CASE WHEN mixed THEN CASE WHEN complete_best THEN power_best_w::DOUBLE END
            WHEN complete_avg1s THEN power_avg_w::DOUBLE END,
       age, CASE WHEN mixed THEN 'mixed' ELSE 'avg1s' END
FROM (
    SELECT level, entity, slot_100ms(ts) AS slot, power_w, power_avg_w, power_best_w, complete, complete_avg1s, complete_best,
           carried_ms // 100 AS age,
           NOT bool_or(complete) OVER e AND NOT bool_or(complete_avg1s) OVER e AS mixed
    FROM fleet_power_100ms
    WHERE date = getvariable('partition_date')
      -- a fleet-day rollup (SET VARIABLE scope = 'fleet') swings only the role and fleet series
      AND (getvariable('scope') IS DISTINCT FROM 'fleet' OR level IN ('role', 'fleet'))
    WINDOW e AS (PARTITION BY level, entity)
);

-- The same for host and above on the 1 s average: the series' sampling step is the median spacing
-- of the slots where its oldest summed value was refreshed (its age did not grow by one slot); a
-- window shorter than two steps holds at most one change of each GPU's 1 s average and would
-- read ~0 W: such windows are left out of the avg1s rows.
CREATE OR REPLACE TEMP TABLE _coarse_upper AS
SELECT level, entity, quantile_disc(gap, 0.5) / 10.0 AS step_s
FROM (
    SELECT level, entity, slot - lag(slot) OVER (PARTITION BY level, entity ORDER BY slot) AS gap
    FROM (
        SELECT level, entity, slot,
               lag(slot) OVER w IS NULL OR slot - lag(slot) OVER w <> 1 OR age <= lag(age) OVER w AS fresh
        FROM _slots
        WHERE gpu = -1 AND pa IS NOT NULL
        WINDOW w AS (PARTITION BY level, entity ORDER BY slot)
    )
    WHERE fresh
)
WHERE gap IS NOT NULL
GROUP BY ALL;

-- 1 s blocks: each block's ten slot values side by side (v0..v9, null where a slot is empty or
-- incomplete), so max, min, count and every 100 ms step inside the block come from one row.
CREATE OR REPLACE TEMP TABLE _blocks AS
WITH b AS (
    SELECT
        level, entity, gpu, pa_series, slot // 10 AS w,
        max(p) FILTER (j = 0) AS v0, max(p) FILTER (j = 1) AS v1,
        max(p) FILTER (j = 2) AS v2, max(p) FILTER (j = 3) AS v3,
        max(p) FILTER (j = 4) AS v4, max(p) FILTER (j = 5) AS v5,
        max(p) FILTER (j = 6) AS v6, max(p) FILTER (j = 7) AS v7,
        max(p) FILTER (j = 8) AS v8, max(p) FILTER (j = 9) AS v9,
        max(pa) FILTER (j = 0) AS a0, max(pa) FILTER (j = 1) AS a1,
        max(pa) FILTER (j = 2) AS a2, max(pa) FILTER (j = 3) AS a3,
        max(pa) FILTER (j = 4) AS a4, max(pa) FILTER (j = 5) AS a5,
        max(pa) FILTER (j = 6) AS a6, max(pa) FILTER (j = 7) AS a7,
        max(pa) FILTER (j = 8) AS a8, max(pa) FILTER (j = 9) AS a9
    FROM (SELECT level, entity, gpu, pa_series, slot, p, pa, (slot % 10)::UTINYINT AS j FROM _slots)
    GROUP BY ALL
),
series AS (
    SELECT level, entity, gpu, 'instant' AS series, w, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9 FROM b
    UNION ALL
    SELECT level, entity, gpu, pa_series, w, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9 FROM b
)
SELECT
    level, entity, gpu, series, w,
    greatest(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9) AS mx,
    least(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9) AS mn,
    (v0 IS NOT NULL)::INT + (v1 IS NOT NULL)::INT + (v2 IS NOT NULL)::INT + (v3 IS NOT NULL)::INT
        + (v4 IS NOT NULL)::INT + (v5 IS NOT NULL)::INT + (v6 IS NOT NULL)::INT + (v7 IS NOT NULL)::INT
        + (v8 IS NOT NULL)::INT + (v9 IS NOT NULL)::INT AS n,
    greatest(abs(v1 - v0), abs(v2 - v1), abs(v3 - v2), abs(v4 - v3), abs(v5 - v4),
             abs(v6 - v5), abs(v7 - v6), abs(v8 - v7), abs(v9 - v8)) AS inner_step,
    v0 AS first_v,
    v9 AS last_v
FROM series
WHERE coalesce(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9) IS NOT NULL;

-- Small integer keys for the (level, entity, gpu, series) of every block: the window and join
-- steps below sort and hash on them instead of strings.
CREATE OR REPLACE TEMP TABLE _keys AS
SELECT row_number() OVER () AS k, *
FROM (SELECT DISTINCT level, entity, gpu, series FROM _blocks);

CREATE OR REPLACE TEMP TABLE _kblocks AS
SELECT k.k, b.w, b.mx, b.mn, b.n, b.inner_step, b.first_v, b.last_v
FROM _blocks AS b
JOIN _keys AS k USING (level, entity, gpu, series);

-- Aligned windows of m seconds (m = 1, 2, 10, 60), each level built from the one below; the
-- lead columns pair each window with the next one (and give the 100 ms step across blocks).
CREATE OR REPLACE TEMP TABLE _windows AS
WITH w1 AS (SELECT k, 1 AS m, w, mx, mn, n, first_v, last_v FROM _kblocks),
w2 AS (SELECT k, 2 AS m, w // 2 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL AS first_v, NULL AS last_v FROM w1 GROUP BY ALL),
w10 AS (SELECT k, 10 AS m, w // 5 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL, NULL FROM w2 GROUP BY ALL),
w60 AS (SELECT k, 60 AS m, w // 6 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL, NULL FROM w10 GROUP BY ALL),
alls AS (FROM w1 UNION ALL FROM w2 UNION ALL FROM w10 UNION ALL FROM w60)
SELECT
    k, m, w, mx, mn, n,
    n = 10 * m AS complete,
    lead(w) OVER x = w + 1 AND n + lead(n) OVER x >= 10 * m AS pair_can_hold_window,
    greatest(mx, lead(mx) OVER x) - least(mn, lead(mn) OVER x) AS pair_range,
    CASE WHEN lead(w) OVER x = w + 1 THEN abs(lead(first_v) OVER x - last_v) END AS edge_step
FROM alls
WINDOW x AS (PARTITION BY k, m ORDER BY w);

-- Each aligned window's swing over the slots it uses: a slot whose value was carried from before
-- the window starts is left out (none left: 0 W, nothing was seen to swing). mx and mn above take
-- every slot: the pairs' ranges stay an upper bound of any window inside them.
CREATE OR REPLACE TEMP TABLE _used AS
SELECT k.k, m.m, s.slot // (10 * m.m) AS w,
       max(s.v) FILTER (s.age <= s.slot % (10 * m.m)) - min(s.v) FILTER (s.age <= s.slot % (10 * m.m)) AS swing
FROM (
    SELECT level, entity, gpu, 'instant' AS series, slot, age, p AS v FROM _slots WHERE p IS NOT NULL
    UNION ALL
    SELECT level, entity, gpu, pa_series, slot, age, pa FROM _slots WHERE pa IS NOT NULL
) AS s
JOIN _keys AS k USING (level, entity, gpu, series)
CROSS JOIN (VALUES (1), (2), (10), (60)) AS m(m)
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _windows AS
SELECT w.*, coalesce(u.swing, 0) AS swing
FROM _windows AS w
LEFT JOIN _used AS u USING (k, m, w);

CREATE OR REPLACE TEMP TABLE _aligned AS
SELECT k, m, max(swing) FILTER (complete) AS best, max(edge_step) AS edge_step
FROM _windows
GROUP BY ALL;

-- Pairs (w, w + 1) whose joint range beats the best aligned window: the only places a sliding
-- window can be larger. Each is re-read at 100 ms as the 1 s blocks it covers.
CREATE OR REPLACE TEMP TABLE _candidates AS
SELECT ky.level, ky.entity, ky.gpu, ky.series, w.k, w.m, w.w, w.w * w.m + i.i AS block
FROM _windows AS w
JOIN _aligned AS a USING (k, m)
JOIN _keys AS ky USING (k)
CROSS JOIN range(120) AS i(i)
WHERE w.pair_can_hold_window AND w.pair_range > coalesce(a.best, -1) AND i.i < 2 * w.m;

-- A window starting at slot s uses the slots from the first whose value was sampled at or after
-- s (first_used: a running min over the slots ordered by where their value was sampled) to its end.
CREATE OR REPLACE TEMP TABLE _sliding AS
WITH r AS (
    SELECT * FROM (
        SELECT c.k, c.m, c.w, s.slot, CASE c.series WHEN 'instant' THEN s.p ELSE s.pa END AS v, s.slot - s.age AS from_slot
        FROM _slots AS s
        JOIN _candidates AS c ON s.level = c.level AND s.entity = c.entity AND s.gpu = c.gpu AND s.slot // 10 = c.block
    ) WHERE v IS NOT NULL
),
firsts AS (
    SELECT k, m, w, slot, first_used
    FROM (
        SELECT k, m, w, slot, is_start,
               min(used_slot) OVER (PARTITION BY k, m, w ORDER BY key DESC, is_start ROWS UNBOUNDED PRECEDING) AS first_used
        FROM (
            SELECT k, m, w, from_slot AS key, false AS is_start, slot AS used_slot, slot FROM r
            UNION ALL
            SELECT k, m, w, slot, true, NULL, slot FROM r
        )
    )
    WHERE is_start
),
x AS (
    SELECT r.k, r.m, r.w, r.slot, r.v, least(coalesce(f.first_used - r.slot, 10 * r.m), 10 * r.m) AS skip
    FROM r JOIN firsts AS f USING (k, m, w, slot)
)
SELECT k, m, max(coalesce(swing, 0)) AS best
FROM (
    SELECT k, m, w, slot, max(v) OVER u - min(v) OVER u AS swing, count(v) OVER g AS filled
    FROM x
    WINDOW g AS (PARTITION BY k, m, w ORDER BY slot RANGE BETWEEN CURRENT ROW AND 10 * m - 1 FOLLOWING),
           u AS (PARTITION BY k, m, w ORDER BY slot RANGE BETWEEN skip FOLLOWING AND 10 * m - 1 FOLLOWING)
)
WHERE slot // (10 * m) = w AND filled = 10 * m
GROUP BY ALL;

WITH ramps AS (
    SELECT b.k, greatest(max(b.inner_step), any_value(a.edge_step)) AS best
    FROM _kblocks AS b
    LEFT JOIN _aligned AS a ON a.k = b.k AND a.m = 1
    GROUP BY b.k
),
named AS (
    SELECT ky.*, e.entity AS entity_name, e.provisioned_w
    FROM _keys AS ky
    JOIN inventory_entities AS e
        ON e.level = ky.level AND e.entity = CASE WHEN ky.gpu >= 0 THEN ky.entity || '/' || ky.gpu ELSE ky.entity END
),
stats AS (
    SELECT
        w.k, w.m,
        quantile_cont(w.swing, 0.5) FILTER (w.complete) AS p50_swing_w,
        quantile_cont(w.swing, 0.99) FILTER (w.complete) AS p99_swing_w,
        count(*) FILTER (w.complete) AS windows_complete,
        count(*) FILTER (NOT w.complete) AS windows_incomplete,
        count(*) FILTER (w.complete AND w.swing > 0.10 * n.provisioned_w) AS windows_over_10pct,
        count(*) FILTER (w.complete AND w.swing > 0.25 * n.provisioned_w) AS windows_over_25pct
    FROM _windows AS w
    JOIN named AS n USING (k)
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    n.level,
    n.entity_name AS entity,
    s.m AS window_s,
    n.series,
    greatest(a.best, sl.best)::FLOAT AS max_swing_w,
    (100 * greatest(a.best, sl.best) / n.provisioned_w)::FLOAT AS max_swing_pct,
    s.p50_swing_w::FLOAT AS p50_swing_w,
    s.p99_swing_w::FLOAT AS p99_swing_w,
    (r.best / 0.1)::FLOAT AS max_ramp_w_per_s,
    s.windows_over_10pct,
    s.windows_over_25pct,
    n.provisioned_w,
    s.windows_complete,
    s.windows_incomplete,
    100 AS grid_step_ms,
    NULL::FLOAT AS sample_interval_ms
FROM stats AS s
JOIN named AS n USING (k)
LEFT JOIN _aligned AS a USING (k, m)
LEFT JOIN _sliding AS sl USING (k, m)
LEFT JOIN ramps AS r USING (k)
LEFT JOIN _coarse AS c ON n.level = 'gpu' AND c.entity = n.entity AND c.gpu = n.gpu
LEFT JOIN _coarse_upper AS cu ON n.level <> 'gpu' AND n.series = 'avg1s' AND cu.level = n.level AND cu.entity = n.entity
WHERE (c.step_s IS NULL OR s.m >= 2 * c.step_s) AND (cu.step_s IS NULL OR s.m >= 2 * cu.step_s)
ORDER BY level, entity, window_s, series
