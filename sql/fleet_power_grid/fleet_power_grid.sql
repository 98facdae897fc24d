-- fleet_power_grid: the summed power of each host, cluster, role and fleet on the grid of the
-- grid_step_ms setting, where that step is not 100 ms (at 100 ms fleet_power_100ms is the grid
-- and this table is empty). power_w sums each reporting GPU's exact mean power over the bin from
-- energy_curve ((E(b) − E(a)) ÷ step, power linear between samples); a bin is complete when every
-- GPU of the entity that reports this day covers it (linked samples on both sides, no gap > 2 s,
-- no 1 s-average-only stretch); incomplete bins keep the partial sum and are left out of swings.
-- A step finer than the sampling (250 ms, 1 s sources on 20 ms) interpolates a bin between samples
-- outside it: carried_ms / ahead_ms say how far before its start and after its end lie the samples
-- its value leans on (the largest of its GPUs'), and a swing window leaves out a bin that leans
-- on a sample outside the window, so the grid never widens a window (the carry rule).
-- The rows come from the asset's kernel (pipeline/grid.py: one host's samples at a time), left in
-- the temp table _grid_series; run alone in the CLI, the table is empty.
CREATE TEMP TABLE IF NOT EXISTS _grid_series (
    level VARCHAR, entity VARCHAR, bin BIGINT, power_w DOUBLE, gpus_reporting INTEGER, complete BOOLEAN,
    carried_ms INTEGER, ahead_ms INTEGER
);

SELECT
    getvariable('partition_date') AS date,
    level,
    entity,
    make_timestamptz(epoch_us(day_start()) + bin * getvariable('grid_step_ms') * 1000) AS ts,
    power_w,
    gpus_reporting,
    complete,
    getvariable('grid_step_ms')::INTEGER AS grid_step_ms,
    carried_ms,
    ahead_ms
FROM _grid_series
