-- Shared by a table's cluster-day SQL and its fleet rollup (sql/<table>/rollup.sql), so both give the same
-- columns from the same formulas. Each macro reads (through query_table, bound when called)
-- temp tables the calling file builds first.

-- A cluster_role part's role ('c0/training' -> 'training').
CREATE OR REPLACE MACRO part_role(entity) AS regexp_extract(entity, '[^/]+$');

-- The cluster -> fleet map, for rolling cluster rows up to their fleet.
CREATE OR REPLACE VIEW cluster_fleet AS SELECT DISTINCT cluster, fleet FROM inventory_gpus;

-- The series power_summary describes each host-and-above entity of grid_table (fleet_power_100ms)
-- on, and its complete slots' values: the instantaneous sum where it has at least as many complete
-- slots as the sum of the driver's 1 s averages, else that sum ('avg1s': an entity with a GPU
-- whose best source is a 1 s average has no instantaneous value), and where neither is ever
-- complete, the sum of each GPU's best value ('mixed': instantaneous where the GPU has it, else
-- its 1 s average; an entity mixing the two kinds of source).
CREATE OR REPLACE MACRO summary_series_slots(grid_table) AS TABLE
WITH g AS (
    SELECT level, entity, power_w, power_avg_w, complete, complete_avg1s, power_best_w, complete_best
    FROM query_table(grid_table)
    WHERE date = getvariable('partition_date')
),
s AS (
    SELECT level, entity,
           CASE WHEN count(*) FILTER (complete) = 0 AND count(*) FILTER (complete_avg1s) = 0 AND count(*) FILTER (complete_best) > 0
                THEN 'mixed'
                WHEN count(*) FILTER (complete) >= count(*) FILTER (complete_avg1s) THEN 'instant' ELSE 'avg1s' END AS series
    FROM g GROUP BY ALL
)
SELECT g.level, g.entity, s.series,
       CASE s.series WHEN 'instant' THEN g.power_w WHEN 'avg1s' THEN g.power_avg_w ELSE g.power_best_w END AS power_w
FROM g JOIN s USING (level, entity)
WHERE CASE s.series WHEN 'instant' THEN g.complete WHEN 'avg1s' THEN g.complete_avg1s ELSE g.complete_best END;

-- power_summary's rows from the tables named by bins (level, entity, bin, n, sum_w, max_w),
-- series (level, entity, series), gpu_time (level, entity, above_tdp_share, idle_share,
-- gpu_slots) and energy (level, entity, energy_j, seconds).
CREATE OR REPLACE MACRO power_summary_rows(bins, series, gpu_time, energy) AS TABLE
WITH basic AS (
    SELECT level, entity, sum(sum_w) / sum(n) AS mean_w, max(max_w) AS max_w, sum(n) AS slots
    FROM query_table(bins) GROUP BY ALL
),
p99 AS (SELECT level, entity, value FROM hist_quantile(bins, 0.99)),
p999 AS (SELECT level, entity, value FROM hist_quantile(bins, 0.999))
SELECT
    getvariable('partition_date') AS date,
    b.level,
    b.entity,
    sr.series,
    b.mean_w::FLOAT AS mean_w,
    p99.value::FLOAT AS p99_w,
    p999.value::FLOAT AS p999_w,
    b.max_w::FLOAT AS max_w,
    (100 * b.mean_w / e.provisioned_w)::FLOAT AS mean_pct,
    (100 * b.max_w / e.provisioned_w)::FLOAT AS max_pct,
    (b.max_w / nullif(b.mean_w, 0))::FLOAT AS peak_to_avg,
    round(en.energy_j / 3.6e6, 9) AS energy_kwh,  -- rounded: parallel sums may differ in the last bit
    t.above_tdp_share::FLOAT AS above_tdp_share,
    t.idle_share::FLOAT AS idle_share,
    e.provisioned_w,
    (en.seconds / 3600.0)::FLOAT AS hours_covered,
    t.gpu_slots::BIGINT AS gpu_slots
FROM basic AS b
JOIN inventory_entities AS e USING (level, entity)
LEFT JOIN p99 USING (level, entity)
LEFT JOIN p999 USING (level, entity)
LEFT JOIN query_table(series) AS sr USING (level, entity)
LEFT JOIN query_table(gpu_time) AS t USING (level, entity)
LEFT JOIN query_table(energy) AS en USING (level, entity)
ORDER BY b.level, b.entity;

-- coincidence's rows from the table named by members (level, entity, sum_of_max_w,
-- mean_member_peak_to_avg, members) and the entity's summed 1 s power in fleet_power_1s.
CREATE OR REPLACE MACRO coincidence_rows(members) AS TABLE
WITH sums AS (
    SELECT level, entity, max(power_w) AS max_w, avg(power_w) AS mean_w
    FROM (
        SELECT f.level, f.entity, f.power_w
        FROM fleet_power_1s AS f
        SEMI JOIN query_table(members) AS m USING (level, entity)
        WHERE f.date = getvariable('partition_date')
        QUALIFY f.gpus_reporting = max(f.gpus_reporting) OVER (PARTITION BY f.level, f.entity)
    )
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    m.level,
    m.entity,
    (s.max_w / m.sum_of_max_w)::FLOAT AS coincidence_factor,
    ((s.max_w / nullif(s.mean_w, 0)) / m.mean_member_peak_to_avg)::FLOAT AS smoothing_ratio,
    m.members::INTEGER AS members,
    s.max_w::FLOAT AS max_1s_w,
    m.sum_of_max_w::FLOAT AS sum_of_member_max_1s_w,
    m.mean_member_peak_to_avg::FLOAT AS mean_member_peak_to_avg
FROM query_table(members) AS m
JOIN sums AS s USING (level, entity)
ORDER BY m.level, m.entity;

-- A table's cluster-day parts as fleet-day inputs: each cluster_role part as its role (the
-- original part name in `part`), each cluster row as its fleet.
CREATE OR REPLACE MACRO cluster_parts(tbl) AS TABLE
SELECT 'role' AS level, part_role(entity) AS entity, entity AS part, * EXCLUDE (level, entity)
FROM query_table(tbl)
WHERE date = getvariable('partition_date') AND level = 'cluster_role'
UNION ALL BY NAME
SELECT 'fleet' AS level, c.fleet AS entity, s.entity AS part, s.* EXCLUDE (level, entity)
FROM query_table(tbl) AS s
JOIN cluster_fleet AS c ON c.cluster = s.entity
WHERE s.date = getvariable('partition_date') AND s.level = 'cluster';

-- fleet_power_1s's rows from the table named by summed (ts, level, entity, power_w, energy_j,
-- gpus_reporting), with the domain's GPU count and provisioned power.
CREATE OR REPLACE MACRO fleet_power_1s_rows(summed) AS TABLE
SELECT
    getvariable('partition_date') AS date,
    s.level,
    s.entity,
    s.ts,
    s.power_w::FLOAT AS power_w,
    s.energy_j,
    s.gpus_reporting::INTEGER AS gpus_reporting,
    e.gpus AS gpus_total,
    e.provisioned_w,
    (100 * s.power_w / e.provisioned_w)::FLOAT AS power_pct
FROM query_table(summed) AS s
JOIN inventory_entities AS e USING (level, entity)
ORDER BY s.level, s.entity, s.ts;
