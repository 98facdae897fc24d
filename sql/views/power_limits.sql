-- The enforced power limit each GPU reported with its power samples (power.power_limit_w: the NVML
-- collector's enforced limit, nvidia-smi's power.limit, DCGM's DCGM_FI_DEV_POWER_MGMT_LIMIT), per
-- GPU and minute of the partition day: the median of its reports in that minute. The one source of
-- "the limit in force" for energy_per_token and power_cap_whatif, which resolve it the same way: a
-- minute's limit holds until the next minute that reports one; before the GPU's first report of
-- the day, that first one; a GPU that reported none all day takes the inventory's power_limit_w,
-- else its TDP.
CREATE OR REPLACE VIEW gpu_limit_minutes AS
SELECT host, gpu, epoch_ns(ts) // 60000000000 * 60000000000 AS from_ns, median(power_limit_w) AS limit_w
FROM power
WHERE date = getvariable('partition_date') AND power_limit_w IS NOT NULL
GROUP BY ALL;
