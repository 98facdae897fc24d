-- power_summary, fleet-day part: the role and fleet rows. Mean, quantiles and max come from the
-- rolled-up 100 ms series (fleet_power_100ms role/fleet rows, complete slots of the instantaneous
-- sum or of the 1 s averages' sum, as in the cluster-day part), energy and hours
-- from the rolled-up 1 s series, and the shares of GPU-time above TDP and idle from the
-- cluster-days' parts weighted by their GPU slots. Reads no per-GPU data.

-- The role and fleet rows as a view the macro reads, so the level filter sits in the scan: a
-- WHERE on the macro's result is pushed between its CTE and its join instead, a plan DuckDB runs
-- ~7x slower (one cluster × 24 h at 100 ms: 1.7 s CPU against 0.24 s; the same rows).
CREATE OR REPLACE TEMP VIEW _upper_100ms AS FROM fleet_power_100ms WHERE level IN ('role', 'fleet');

-- The complete slots binned straight from the macro, with their series (one per entity, so it
-- splits no bin): the slots are read once and never held.
CREATE OR REPLACE TEMP TABLE _upper_bins AS
SELECT level, entity, series, round(power_w) AS bin, count(*) AS n, sum(power_w) AS sum_w, max(power_w) AS max_w
FROM summary_series_slots('_upper_100ms')
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _bins AS SELECT level, entity, bin, n, sum_w, max_w FROM _upper_bins;

CREATE OR REPLACE TEMP TABLE _series AS SELECT DISTINCT level, entity, series FROM _upper_bins;

CREATE OR REPLACE TEMP TABLE _gpu_time AS
SELECT
    level,
    entity,
    sum(above_tdp_share * gpu_slots) / sum(gpu_slots) AS above_tdp_share,
    sum(idle_share * gpu_slots) / sum(gpu_slots) AS idle_share,
    sum(gpu_slots) AS gpu_slots
FROM cluster_parts('power_summary')
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _energy AS
SELECT level, entity, sum(energy_j) AS energy_j, count(*) AS seconds
FROM fleet_power_1s
WHERE date = getvariable('partition_date') AND level IN ('role', 'fleet')
GROUP BY ALL;

FROM power_summary_rows('_bins', '_series', '_gpu_time', '_energy')
