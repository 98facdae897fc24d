-- swing_stats: per level (gpu, host, cluster, role, fleet), entity, window W ∈ {1, 2, 10, 60} s and
-- series (instant = the 100 ms grid of instantaneous power; avg1s = the driver's 1 s average on
-- the same grid, where the source reports one): the largest max − min inside any W-long window
-- of the day (sliding at 100 ms, exact), the p50/p99 of the swing over the day's aligned
-- W-long windows, the largest 100 ms ramp (W/s) and how many aligned windows swing more than
-- 10% / 25% of the entity's provisioned power. Windows with an incomplete slot are excluded.
--
-- How it stays cheap: the slots are read once into 1 s blocks (the ten values side by side, so
-- every 100 ms step is a column difference). Aligned W-windows come from the blocks. A sliding
-- window that starts in aligned window w lies inside w and w + 1, so it can beat the best
-- aligned window only if the pair's joint range does; only those few pairs are re-read at
-- 100 ms and slid exactly.
CREATE OR REPLACE TEMP TABLE _carried AS FROM gpu_grid_carried('power_100ms');

CREATE OR REPLACE TEMP VIEW _slots AS
SELECT 'gpu' AS level, host AS entity, gpu::INTEGER AS gpu, slot, power_w AS p, power_avg_w AS pa, true AS ok
FROM gpu_grid_day('power_100ms', '_carried')
UNION ALL
SELECT level, entity, -1 AS gpu, slot_100ms(ts) AS slot, power_w, power_avg_w, complete
FROM fleet_power_100ms
WHERE date = getvariable('partition_date');

-- 1 s blocks: each block's ten slot values side by side (v0..v9, null where a slot is empty or
-- incomplete), so max, min, count and every 100 ms step inside the block come from one row.
CREATE OR REPLACE TEMP TABLE _blocks AS
WITH b AS (
    SELECT
        level, entity, gpu, slot // 10 AS w,
        max(p) FILTER (ok AND slot % 10 = 0) AS v0, max(p) FILTER (ok AND slot % 10 = 1) AS v1,
        max(p) FILTER (ok AND slot % 10 = 2) AS v2, max(p) FILTER (ok AND slot % 10 = 3) AS v3,
        max(p) FILTER (ok AND slot % 10 = 4) AS v4, max(p) FILTER (ok AND slot % 10 = 5) AS v5,
        max(p) FILTER (ok AND slot % 10 = 6) AS v6, max(p) FILTER (ok AND slot % 10 = 7) AS v7,
        max(p) FILTER (ok AND slot % 10 = 8) AS v8, max(p) FILTER (ok AND slot % 10 = 9) AS v9,
        max(pa) FILTER (ok AND slot % 10 = 0) AS a0, max(pa) FILTER (ok AND slot % 10 = 1) AS a1,
        max(pa) FILTER (ok AND slot % 10 = 2) AS a2, max(pa) FILTER (ok AND slot % 10 = 3) AS a3,
        max(pa) FILTER (ok AND slot % 10 = 4) AS a4, max(pa) FILTER (ok AND slot % 10 = 5) AS a5,
        max(pa) FILTER (ok AND slot % 10 = 6) AS a6, max(pa) FILTER (ok AND slot % 10 = 7) AS a7,
        max(pa) FILTER (ok AND slot % 10 = 8) AS a8, max(pa) FILTER (ok AND slot % 10 = 9) AS a9
    FROM _slots
    GROUP BY ALL
),
series AS (
    SELECT level, entity, gpu, 'instant' AS series, w, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9 FROM b
    UNION ALL
    SELECT level, entity, gpu, 'avg1s', w, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9 FROM b
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

-- Aligned windows of m seconds (m = 1, 2, 10, 60), each level built from the one below; the
-- lead columns pair each window with the next one (and give the 100 ms step across blocks).
CREATE OR REPLACE TEMP TABLE _windows AS
WITH w1 AS (SELECT level, entity, gpu, series, 1 AS m, w, mx, mn, n, first_v, last_v FROM _blocks),
w2 AS (SELECT level, entity, gpu, series, 2 AS m, w // 2 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL AS first_v, NULL AS last_v FROM w1 GROUP BY ALL),
w10 AS (SELECT level, entity, gpu, series, 10 AS m, w // 5 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL, NULL FROM w2 GROUP BY ALL),
w60 AS (SELECT level, entity, gpu, series, 60 AS m, w // 6 AS w, max(mx) AS mx, min(mn) AS mn, sum(n) AS n, NULL, NULL FROM w10 GROUP BY ALL),
alls AS (FROM w1 UNION ALL FROM w2 UNION ALL FROM w10 UNION ALL FROM w60)
SELECT
    level, entity, gpu, series, m, w, mx, mn, n,
    n = 10 * m AS complete,
    lead(w) OVER k = w + 1 AND n + lead(n) OVER k >= 10 * m AS pair_can_hold_window,
    greatest(mx, lead(mx) OVER k) - least(mn, lead(mn) OVER k) AS pair_range,
    CASE WHEN lead(w) OVER k = w + 1 THEN abs(lead(first_v) OVER k - last_v) END AS edge_step
FROM alls
WINDOW k AS (PARTITION BY level, entity, gpu, series, m ORDER BY w);

CREATE OR REPLACE TEMP TABLE _aligned AS
SELECT level, entity, gpu, series, m, max(mx - mn) FILTER (complete) AS best
FROM _windows
GROUP BY ALL;

-- Pairs (w, w + 1) whose joint range beats the best aligned window: the only places a sliding
-- window can be larger. Each is re-read at 100 ms as the 1 s blocks it covers.
CREATE OR REPLACE TEMP TABLE _candidates AS
SELECT w.level, w.entity, w.gpu, w.series, w.m, w.w, w.w * w.m + k.i AS block
FROM _windows AS w
JOIN _aligned AS a USING (level, entity, gpu, series, m)
CROSS JOIN range(120) AS k(i)
WHERE w.pair_can_hold_window AND w.pair_range > coalesce(a.best, -1) AND k.i < 2 * w.m;

CREATE OR REPLACE TEMP TABLE _sliding AS
WITH r AS (
    SELECT c.level, c.entity, c.gpu, c.series, c.m, c.w, s.slot, CASE c.series WHEN 'instant' THEN s.p ELSE s.pa END AS v
    FROM _slots AS s
    JOIN _candidates AS c ON s.level = c.level AND s.entity = c.entity AND s.gpu = c.gpu AND s.slot // 10 = c.block
    WHERE s.ok
)
SELECT level, entity, gpu, series, m, max(swing) AS best
FROM (
    SELECT level, entity, gpu, series, m, w, slot,
           max(v) OVER g - min(v) OVER g AS swing, count(v) OVER g AS filled
    FROM r
    WINDOW g AS (PARTITION BY level, entity, gpu, series, m, w ORDER BY slot RANGE BETWEEN CURRENT ROW AND 10 * m - 1 FOLLOWING)
)
WHERE slot // (10 * m) = w AND filled = 10 * m
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
    SELECT level, entity, gpu, series, greatest(max(b.inner_step), max(w.edge_step)) AS best
    FROM _blocks AS b
    JOIN (SELECT level, entity, gpu, series, w, edge_step FROM _windows WHERE m = 1) AS w USING (level, entity, gpu, series, w)
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
