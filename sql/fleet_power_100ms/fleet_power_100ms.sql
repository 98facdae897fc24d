-- fleet_power_100ms: the summed power of each host, cluster, role and fleet on the 100 ms grid.
-- A slot is complete when every GPU of the entity that reports this day has an instantaneous
-- value there (its own or one carried under the rule in sql/views/power_series.sql; a GPU
-- whose source is a 1 s average has none); incomplete
-- slots keep the partial sum and are excluded from swing windows. power_avg_w sums the
-- driver's 1 s averages and is null unless every summed GPU carries one; complete_avg1s says
-- every reporting GPU has one (the series of a GPU whose best source is a 1 s average).
-- power_best_w sums each GPU's best value: its instantaneous power where it has one, else its
-- 1 s average (an entity mixing an instantaneous source and a 1 s-average one has a value in no
-- other series); complete_best says every reporting GPU has one.
-- carried_ms: how far the oldest summed value was carried into the slot (0: every value was
-- sampled in it), so a swing window can leave out values sampled before it starts.
CREATE OR REPLACE TEMP TABLE _carried AS FROM gpu_grid_carried('power_100ms');

WITH gpus AS (
    SELECT * FROM reporting_gpus('power_100ms')
),
expected AS (
    SELECT 'host' AS level, host AS entity, count(*) AS n FROM gpus GROUP BY ALL
    UNION ALL SELECT 'cluster', cluster, count(DISTINCT host) FROM gpus GROUP BY ALL
    UNION ALL SELECT 'role', role, count(DISTINCT host) FROM gpus GROUP BY ALL
    UNION ALL SELECT 'fleet', fleet, count(DISTINCT host) FROM gpus GROUP BY ALL
),
-- The big group-by (every GPU row of the day) keys on a host number, not the host's name, and
-- keeps narrow states (bool_and, an INTEGER max): its hash table is the step's largest.
host_numbers AS (
    SELECT host, cluster, role, fleet, row_number() OVER (ORDER BY host)::INTEGER AS host_no
    FROM (SELECT DISTINCT host, cluster, role, fleet FROM gpus)
),
hosts AS (
    SELECT
        n.host_no,
        g.slot,
        sum(g.power_w) AS power_w,
        CASE WHEN bool_and(g.power_avg_w IS NOT NULL) THEN sum(g.power_avg_w) END AS power_avg_w,
        count(g.power_w) AS gpus_reporting,
        count(g.power_avg_w) AS gpus_avg1s,
        sum(coalesce(g.power_w, g.power_avg_w)) AS power_best_w,
        count(coalesce(g.power_w, g.power_avg_w)) AS gpus_best,
        max((g.slot - g.from_slot)::INTEGER) AS carried_slots
    FROM gpu_grid_day('power_100ms', '_carried') AS g
    JOIN inventory_gpus AS i USING (host, gpu)  -- the small inventory table as build side
    JOIN host_numbers AS n USING (host)
    GROUP BY n.host_no, g.slot
),
-- Not materialized: DuckDB keeps the hosts rows it reads (for both readers), not a second copy of them.
host_rows AS NOT MATERIALIZED (
    SELECT h.* EXCLUDE (host_no), n.host, n.cluster, n.role, n.fleet, h.gpus_reporting = e.n AS complete, h.gpus_avg1s = e.n AS complete_avg1s,
           h.gpus_best = e.n AS complete_best
    FROM hosts AS h
    JOIN host_numbers AS n USING (host_no)
    JOIN expected AS e ON e.level = 'host' AND e.entity = n.host
),
-- One group-by per level rather than GROUPING SETS, which holds the three levels' hash tables at
-- once (measured: about 100 MB less peak memory on a day of 8 GPUs × 24 h).
upper AS (
    SELECT 'cluster' AS level, cluster AS entity, slot,
        sum(power_w) AS power_w,
        CASE WHEN bool_and(power_avg_w IS NOT NULL) THEN sum(power_avg_w) END AS power_avg_w,
        sum(gpus_reporting) AS gpus_reporting,
        bool_and(complete) AS all_hosts_complete,
        bool_and(complete_avg1s) AS all_hosts_complete_avg1s,
        sum(power_best_w) AS power_best_w,
        bool_and(complete_best) AS all_hosts_complete_best,
        max(carried_slots) AS carried_slots,
        count(*) AS hosts
    FROM host_rows GROUP BY cluster, slot
    UNION ALL
    SELECT 'role' AS level, role AS entity, slot,
        sum(power_w) AS power_w,
        CASE WHEN bool_and(power_avg_w IS NOT NULL) THEN sum(power_avg_w) END AS power_avg_w,
        sum(gpus_reporting) AS gpus_reporting,
        bool_and(complete) AS all_hosts_complete,
        bool_and(complete_avg1s) AS all_hosts_complete_avg1s,
        sum(power_best_w) AS power_best_w,
        bool_and(complete_best) AS all_hosts_complete_best,
        max(carried_slots) AS carried_slots,
        count(*) AS hosts
    FROM host_rows GROUP BY role, slot
    UNION ALL
    SELECT 'fleet' AS level, fleet AS entity, slot,
        sum(power_w) AS power_w,
        CASE WHEN bool_and(power_avg_w IS NOT NULL) THEN sum(power_avg_w) END AS power_avg_w,
        sum(gpus_reporting) AS gpus_reporting,
        bool_and(complete) AS all_hosts_complete,
        bool_and(complete_avg1s) AS all_hosts_complete_avg1s,
        sum(power_best_w) AS power_best_w,
        bool_and(complete_best) AS all_hosts_complete_best,
        max(carried_slots) AS carried_slots,
        count(*) AS hosts
    FROM host_rows GROUP BY fleet, slot
),
entities AS (
    SELECT 'host' AS level, host AS entity, slot, power_w, power_avg_w, gpus_reporting, complete, complete_avg1s, carried_slots,
           power_best_w, complete_best
    FROM host_rows
    UNION ALL
    SELECT u.level, u.entity, u.slot, u.power_w, u.power_avg_w, u.gpus_reporting, u.all_hosts_complete AND u.hosts = e.n,
           u.all_hosts_complete_avg1s AND u.hosts = e.n, u.carried_slots, u.power_best_w, u.all_hosts_complete_best AND u.hosts = e.n
    FROM upper AS u JOIN expected AS e USING (level, entity)
)
SELECT
    getvariable('partition_date') AS date,
    level,
    entity,
    slot_ts(slot) AS ts,
    power_w::FLOAT AS power_w,
    power_avg_w::FLOAT AS power_avg_w,
    gpus_reporting::INTEGER AS gpus_reporting,
    complete,
    complete_avg1s,
    (100 * carried_slots)::INTEGER AS carried_ms,
    power_best_w::FLOAT AS power_best_w,
    complete_best
FROM entities
ORDER BY level, entity, ts
