-- coincidence: per host (members: its GPUs), cluster, role and fleet (members: their hosts) and
-- day, on the 100 ms grid: coincidence_factor = max of the entity's summed power ÷ the sum of
-- its members' own maxima (1.0 = every member peaks in the same 100 ms; 1/members = they never
-- overlap above their base), smoothing_ratio = the sum's peak-to-average ÷ the members' mean
-- peak-to-average (below 1: the members' peaks cancel out). Built from power_summary, whose
-- maxima are over complete slots for sums and over every slot for GPUs.
WITH s AS (
    SELECT level, entity, max_w, peak_to_avg FROM power_summary WHERE date = getvariable('partition_date')
),
membership AS (
    SELECT DISTINCT 'host' AS level, host AS entity, 'gpu' AS member_level, host || '/' || gpu AS member FROM inventory_gpus
    UNION ALL SELECT DISTINCT 'cluster', cluster, 'host', host FROM inventory_gpus
    UNION ALL SELECT DISTINCT 'role', role, 'host', host FROM inventory_gpus
    UNION ALL SELECT DISTINCT 'fleet', fleet, 'host', host FROM inventory_gpus
),
members AS (
    SELECT m.level, m.entity, sum(s.max_w) AS sum_of_max_w, avg(s.peak_to_avg) AS mean_member_peak_to_avg, count(*) AS members
    FROM membership AS m
    JOIN s ON s.level = m.member_level AND s.entity = m.member
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    m.level,
    m.entity,
    (s.max_w / m.sum_of_max_w)::FLOAT AS coincidence_factor,
    (s.peak_to_avg / m.mean_member_peak_to_avg)::FLOAT AS smoothing_ratio,
    m.members::INTEGER AS members,
    s.max_w AS max_w,
    m.sum_of_max_w::FLOAT AS sum_of_member_max_w
FROM members AS m
JOIN s USING (level, entity)
ORDER BY m.level, m.entity
