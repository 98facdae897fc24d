-- fleet_power_1s, fleet-day part: per second, the role and fleet rows, summed from the
-- cluster-days' parts (a role = its cluster_role parts, a fleet = its clusters), with the
-- domain's GPU count and provisioned power from the inventory. Reads no per-GPU data.
CREATE OR REPLACE TEMP TABLE _summed AS
SELECT ts, level, entity, sum(power_w) AS power_w, sum(energy_j) AS energy_j, sum(gpus_reporting) AS gpus_reporting
FROM cluster_parts('fleet_power_1s')
GROUP BY ALL;

FROM fleet_power_1s_rows('_summed')
