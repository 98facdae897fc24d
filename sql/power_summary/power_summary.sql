-- power_summary: per entity (gpu, host, cluster, role, fleet) and day, on the 100 ms grid:
-- mean, p99, p99.9 and max power (W; quantiles nearest-rank over 1 W bins), mean and max as %
-- of provisioned, peak-to-average (max ÷ mean), energy (kWh, trapezoid-integrated samples via
-- power_1s / fleet_power_1s), and the share of GPU-time above TDP and idle (below 20% of TDP:
-- an H200 idles at 80–120 W of 700), over the entity's GPUs' slots. Entity quantiles use the
-- complete slots only (every reporting GPU present), of the instantaneous sum or, for an entity
-- with a GPU whose best source is a 1 s average, of the sum of 1 s averages: series says which
-- ('instant', 'avg1s'; a GPU: 'mixed' when its best source is a 1 s average in some minutes
-- only; host and above: 'mixed' on each GPU's best value where neither series is ever complete,
-- an entity mixing an instantaneous source and a 1 s-average one). hours_covered: seconds with power (power_1s).
-- gpu_slots: the GPU-slots the shares are over (what the fleet rollup weights them by).
CREATE OR REPLACE TEMP TABLE _gpu_bins AS
SELECT
    'gpu' AS level,
    g.host || '/' || g.gpu AS entity,
    any_value(i.host) AS host, any_value(i.cluster) AS cluster, any_value(i.role) AS role, any_value(i.fleet) AS fleet,
    round(g.power_w) AS bin,
    count(*) AS n,
    sum(g.power_w) AS sum_w,
    max(g.power_w) AS max_w,
    count(*) FILTER (g.power_w > i.tdp_w) AS above_tdp,
    count(*) FILTER (g.power_w < 0.2 * i.tdp_w) AS idle,
    count(*) FILTER (g.is_average) AS averages
FROM power_100ms AS g
JOIN inventory_gpus AS i USING (host, gpu)
WHERE g.date = getvariable('partition_date')
GROUP BY g.host, g.gpu, bin;

-- The host-and-above entities' complete slots binned straight from the macro, with their series (one
-- per entity, so it splits no bin): the slots are read once and never held.
CREATE OR REPLACE TEMP TABLE _upper_bins AS
SELECT level, entity, series, round(power_w) AS bin, count(*) AS n, sum(power_w) AS sum_w, max(power_w) AS max_w
FROM summary_series_slots('fleet_power_100ms')
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _bins AS
SELECT level, entity, bin, n, sum_w, max_w FROM _gpu_bins
UNION ALL
SELECT level, entity, bin, n, sum_w, max_w FROM _upper_bins;

CREATE OR REPLACE TEMP TABLE _series AS
SELECT level, entity,
       CASE WHEN sum(averages) = 0 THEN 'instant' WHEN sum(averages) = sum(n) THEN 'avg1s' ELSE 'mixed' END AS series
FROM _gpu_bins GROUP BY ALL
UNION ALL
SELECT DISTINCT level, entity, series FROM _upper_bins;

CREATE OR REPLACE TEMP TABLE _gpu_time AS
SELECT
    CASE WHEN grouping(entity) = 0 THEN 'gpu' WHEN grouping(host) = 0 THEN 'host'
         WHEN grouping(cluster) = 0 THEN 'cluster' WHEN grouping(role) = 0 THEN 'role' ELSE 'fleet' END AS level,
    coalesce(entity, host, cluster, role, fleet) AS entity,
    sum(above_tdp) / sum(n) AS above_tdp_share,
    sum(idle) / sum(n) AS idle_share,
    sum(n) AS gpu_slots
FROM _gpu_bins
GROUP BY GROUPING SETS ((entity), (host), (cluster), (role), (fleet));

CREATE OR REPLACE TEMP TABLE _energy AS
SELECT 'gpu' AS level, host || '/' || gpu AS entity, sum(energy_j) AS energy_j, count(*) AS seconds
FROM power_1s WHERE date = getvariable('partition_date') GROUP BY ALL
UNION ALL
SELECT level, entity, sum(energy_j), count(*)
FROM fleet_power_1s WHERE date = getvariable('partition_date') GROUP BY ALL;

FROM power_summary_rows('_bins', '_series', '_gpu_time', '_energy')
