-- severity: ERROR
-- description: p99 ≤ p99.9 ≤ max at 2 s.
SELECT level, entity FROM power_headroom
WHERE date = getvariable('partition_date')
  AND NOT (p99_2s_w <= p999_2s_w + 1e-3 AND p999_2s_w <= max_2s_w + 1e-3)
