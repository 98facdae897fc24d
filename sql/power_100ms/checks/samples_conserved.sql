-- severity: ERROR
-- description: Each GPU's samples on the grid equal its samples in power_1s (every best-source sample lands in exactly one slot: nothing lost or double-counted).
-- failure: {n} GPU(s) have a different sample count on the grid than in power_1s
WITH g AS (SELECT host, gpu, sum(samples) AS n FROM power_100ms WHERE date = getvariable('partition_date') GROUP BY ALL),
     s AS (SELECT host, gpu, sum(samples) AS n FROM power_1s WHERE date = getvariable('partition_date') GROUP BY ALL)
SELECT host, gpu, g.n, s.n FROM g FULL JOIN s USING (host, gpu)
WHERE g.n IS DISTINCT FROM s.n ORDER BY 1, 2
