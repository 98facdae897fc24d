-- swing_stats: per level (gpu, host, cluster, role, fleet), entity, window W ∈ {1, 2, 10, 60} s and
-- series (instant = the 100 ms grid of instantaneous power; avg1s = the driver's 1 s average on
-- the same grid, where the source reports one): the largest max − min inside any W-long window
-- of the day (sliding at 100 ms, exact), the p50/p99 of the swing over the day's aligned
-- W-long windows, the largest 100 ms ramp (W/s) and how many aligned windows swing more than
-- 10% / 25% of the entity's provisioned power. Windows with an incomplete slot are excluded.
--
-- How it stays cheap: the slots are read once into 1 s blocks (max, min, count, first, last).
-- Aligned W-windows come from the blocks. A sliding window that starts in aligned window w lies
-- inside w and w + 1, so it can beat the best aligned window only if the pair's joint range does;
-- only those few pairs are re-read at 100 ms and slid exactly (likewise for the ramp).
CREATE OR REPLACE TEMP TABLE _carried AS FROM gpu_grid_carried('power_100ms');

CREATE OR REPLACE TEMP VIEW _slots AS
SELECT 'gpu' AS level, host AS entity, gpu::INTEGER AS gpu, slot, power_w AS p, power_avg_w AS pa, true AS ok
FROM gpu_grid_day('power_100ms', '_carried')
UNION ALL
SELECT level, entity, -1 AS gpu, slot_100ms(ts) AS slot, power_w, power_avg_w, complete
FROM fleet_power_100ms
WHERE date = getvariable('partition_date');

CREATE OR REPLACE TEMP TABLE _blocks AS
WITH b AS (
    SELECT
        level, entity, gpu, slot // 10 AS w,
        max(p) FILTER (ok) AS mx, min(p) FILTER (ok) AS mn, count(p) FILTER (ok) AS n,
        arg_min(p, slot) FILTER (ok) AS first_p, min(slot) FILTER (ok) AS first_slot,
        arg_max(p, slot) FILTER (ok) AS last_p, max(slot) FILTER (ok) AS last_slot,
        max(pa) FILTER (ok) AS amx, min(pa) FILTER (ok) AS amn, count(pa) FILTER (ok) AS an,
        arg_min(pa, slot) FILTER (ok AND pa IS NOT NULL) AS afirst_p, min(slot) FILTER (ok AND pa IS NOT NULL) AS afirst_slot,
        arg_max(pa, slot) FILTER (ok AND pa IS NOT NULL) AS alast_p, max(slot) FILTER (ok AND pa IS NOT NULL) AS alast_slot
    FROM _slots
    GROUP BY ALL
)
SELECT level, entity, gpu, 'instant' AS series, w, mx, mn, n, first_p, first_slot, last_p, last_slot FROM b WHERE n > 0
UNION ALL
SELECT level, entity, gpu, 'avg1s', w, amx, amn, an, afirst_p, afirst_slot, alast_p, alast_slot FROM b WHERE an > 0;

-- Aligned windows of m seconds (m = 1, 2, 10, 60), each level built from the one below.
CREATE OR REPLACE TEMP TABLE _windows AS
WITH w1 AS (SELECT level, entity, gpu, series, 1 AS m, w, mx, mn, n FROM _blocks),
w2 AS (SELECT level, entity, gpu, series, 2 AS m, w // 2 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n FROM w1 GROUP BY ALL),
w10 AS (SELECT level, entity, gpu, series, 10 AS m, w // 5 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n FROM w2 GROUP BY ALL),
w60 AS (SELECT level, entity, gpu, series, 60 AS m, w // 6 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n FROM w10 GROUP BY ALL),
alls AS (FROM w1 UNION ALL FROM w2 UNION ALL FROM w10 UNION ALL FROM w60)
SELECT
    *,
    n = 10 * m AS complete,
    lead(w) OVER k = w + 1 AND n + lead(n) OVER k >= 10 * m AS pair_can_hold_window,
    greatest(mx, lead(mx) OVER k) - least(mn, lead(mn) OVER k) AS pair_range
FROM alls
WINDOW k AS (PARTITION BY level, entity, gpu, series, m ORDER BY w);

CREATE OR REPLACE TEMP TABLE _aligned AS
SELECT level, entity, gpu, series, m, max(mx - mn) FILTER (complete) AS best
FROM _windows
GROUP BY ALL;

-- Pairs (w, w + 1) whose joint range beats the best aligned window: the only places a sliding
-- window can be larger.
CREATE OR REPLACE TEMP TABLE _candidates AS
SELECT w.level, w.entity, w.gpu, w.series, w.m, w.w
FROM _windows AS w
JOIN _aligned AS a USING (level, entity, gpu, series, m)
WHERE w.pair_can_hold_window AND w.pair_range > coalesce(a.best, -1);

CREATE OR REPLACE TEMP MACRO _slide(mm) AS TABLE
WITH c AS (
    SELECT level, entity, gpu, series, w, w AS part FROM _candidates WHERE m = mm
    UNION ALL
    SELECT level, entity, gpu, series, w, w + 1 FROM _candidates WHERE m = mm
),
r AS (
    SELECT c.level, c.entity, c.gpu, c.series, c.w, s.slot, CASE c.series WHEN 'instant' THEN s.p ELSE s.pa END AS v
    FROM _slots AS s
    JOIN c ON s.level = c.level AND s.entity = c.entity AND s.gpu = c.gpu AND s.slot // (10 * mm) = c.part
    WHERE s.ok
),
slid AS (
    SELECT
        *,
        max(v) OVER f - min(v) OVER f AS swing,
        count(v) OVER f AS filled
    FROM r
    WINDOW f AS (PARTITION BY level, entity, gpu, series, w ORDER BY slot RANGE BETWEEN CURRENT ROW AND 10 * mm - 1 FOLLOWING)
)
SELECT level, entity, gpu, series, mm AS m, max(swing) AS best
FROM slid
WHERE slot // (10 * mm) = w AND filled = 10 * mm
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _sliding AS
FROM _slide(1) UNION ALL FROM _slide(2) UNION ALL FROM _slide(10) UNION ALL FROM _slide(60);

-- Ramps: steps across a 1 s block boundary come from the blocks' first/last values; a step
-- inside a block can beat the best of those only if the block's range does, so only such
-- blocks are re-read at 100 ms.
CREATE OR REPLACE TEMP TABLE _edge_ramps AS
SELECT level, entity, gpu, series, max(step) AS best
FROM (
    SELECT
        level, entity, gpu, series,
        CASE WHEN lead(first_slot) OVER k = last_slot + 1 THEN abs(lead(first_p) OVER k - last_p) END AS step
    FROM _blocks
    WINDOW k AS (PARTITION BY level, entity, gpu, series ORDER BY w)
)
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _inner_ramps AS
WITH c AS (
    SELECT b.level, b.entity, b.gpu, b.series, b.w
    FROM _blocks AS b
    LEFT JOIN _edge_ramps AS e USING (level, entity, gpu, series)
    WHERE b.n >= 2 AND b.mx - b.mn > coalesce(e.best, -1)
),
r AS (
    SELECT c.level, c.entity, c.gpu, c.series, c.w, s.slot, CASE c.series WHEN 'instant' THEN s.p ELSE s.pa END AS v
    FROM _slots AS s
    JOIN c ON s.level = c.level AND s.entity = c.entity AND s.gpu = c.gpu AND s.slot // 10 = c.w
    WHERE s.ok
)
SELECT level, entity, gpu, series, max(step) AS best
FROM (
    SELECT
        level, entity, gpu, series,
        CASE WHEN lag(slot) OVER k = slot - 1 THEN abs(v - lag(v) OVER k) END AS step
    FROM r
    WHERE v IS NOT NULL
    WINDOW k AS (PARTITION BY level, entity, gpu, series, w ORDER BY slot)
)
GROUP BY ALL;

WITH stats AS (
    SELECT
        w.level, w.entity, w.gpu, w.series, w.m,
        quantile_cont(w.mx - w.mn, 0.5) FILTER (w.complete) AS p50_swing_w,
        quantile_cont(w.mx - w.mn, 0.99) FILTER (w.complete) AS p99_swing_w,
        count(*) FILTER (w.complete) AS windows_complete,
        count(*) FILTER (NOT w.complete) AS windows_incomplete,
        count(*) FILTER (w.complete AND w.mx - w.mn > 0.10 * e.provisioned_w) AS windows_over_10pct,
        count(*) FILTER (w.complete AND w.mx - w.mn > 0.25 * e.provisioned_w) AS windows_over_25pct,
        any_value(e.provisioned_w) AS provisioned_w,
        any_value(e.entity) AS entity_name
    FROM _windows AS w
    JOIN inventory_entities AS e
        ON e.level = w.level AND e.entity = CASE WHEN w.gpu >= 0 THEN w.entity || '/' || w.gpu ELSE w.entity END
    GROUP BY ALL
),
ramps AS (
    SELECT level, entity, gpu, series, max(best) AS best
    FROM (FROM _edge_ramps UNION ALL FROM _inner_ramps)
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    s.level,
    s.entity_name AS entity,
    s.m AS window_s,
    s.series,
    greatest(a.best, sl.best)::FLOAT AS max_swing_w,
    (100 * greatest(a.best, sl.best) / s.provisioned_w)::FLOAT AS max_swing_pct,
    s.p50_swing_w::FLOAT AS p50_swing_w,
    s.p99_swing_w::FLOAT AS p99_swing_w,
    (r.best / 0.1)::FLOAT AS max_ramp_w_per_s,
    s.windows_over_10pct,
    s.windows_over_25pct,
    s.provisioned_w,
    s.windows_complete,
    s.windows_incomplete
FROM stats AS s
LEFT JOIN _aligned AS a USING (level, entity, gpu, series, m)
LEFT JOIN _sliding AS sl USING (level, entity, gpu, series, m)
LEFT JOIN ramps AS r USING (level, entity, gpu, series)
ORDER BY s.level, entity, window_s, s.series
