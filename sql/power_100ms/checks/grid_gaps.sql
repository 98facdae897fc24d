-- severity: WARN
-- description: Each GPU fills ≥ 95% of the 100 ms slots between its first and last sample (sampled slower than 10 Hz, or stalled).
-- failure: {n} GPU(s) leave > 5% of their 100 ms slots empty (sampled slower than 10 Hz?): swings there use carried values or are excluded
SELECT gpu, round(empty_share, 4) AS empty_share FROM (
    SELECT host || '/' || gpu AS gpu, 1 - count(*) / (slot_100ms(max(ts)) - slot_100ms(min(ts)) + 1) AS empty_share
    FROM power_100ms WHERE date = getvariable('partition_date') GROUP BY host, gpu
) WHERE empty_share > 0.05 ORDER BY empty_share DESC
