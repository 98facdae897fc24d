-- severity: WARN
-- description: Every reporting GPU is listed in inventory.yaml.
-- failure: {n} GPU(s) report power but are not in inventory.yaml: left out of host/cluster sums
SELECT DISTINCT p.host, p.gpu FROM power_1s p
ANTI JOIN inventory_gpus i USING (host, gpu)
WHERE p.date = getvariable('partition_date') ORDER BY 1, 2
