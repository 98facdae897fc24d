-- severity: WARN
-- description: Each reporting GPU covers ≥ 95% of the day's seconds (partial days are normal).
-- failure: {n} GPU(s) cover < 95% of the day: {list}
WITH c AS (
    SELECT host || '/' || gpu AS gpu, count(*) / 86400.0 AS coverage
    FROM power_1s WHERE date = getvariable('partition_date') GROUP BY ALL
)
SELECT gpu, round(coverage, 4) AS coverage FROM c WHERE coverage < 0.95
UNION ALL
SELECT 'no power samples this day (no usable files under power/date=…)', NULL WHERE NOT EXISTS (SELECT 1 FROM c)
ORDER BY coverage NULLS FIRST, gpu
