-- severity: ERROR
-- description: 0 ≤ mean ≤ max and p99 ≤ p99.9 ≤ max for every entity.
-- failure: {n} row(s) break 0 ≤ mean ≤ max or p99 ≤ p99.9 ≤ max
SELECT level, entity, mean_w, p99_w, p999_w, max_w FROM power_summary
WHERE date = getvariable('partition_date')
  AND NOT (mean_w <= max_w + 1e-3 AND p99_w <= p999_w AND p999_w <= round(max_w) + 0.5 AND mean_w >= 0)
