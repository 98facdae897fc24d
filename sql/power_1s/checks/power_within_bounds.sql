-- severity: ERROR
-- description: Power within [0, 2 × TDP] for every GPU.
-- failure: power outside [0, 2 × TDP] on {n} GPU(s)
SELECT p.host, p.gpu, min(p.min_w) AS min_w, max(p.max_w) AS max_w, any_value(i.tdp_w) AS tdp_w
FROM power_1s p JOIN inventory_gpus i USING (host, gpu)
WHERE p.date = getvariable('partition_date')
GROUP BY ALL
HAVING min(p.min_w) < 0 OR max(p.max_w) > 2.0 * any_value(i.tdp_w)
ORDER BY 1, 2
