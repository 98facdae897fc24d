-- severity: ERROR
-- description: Max swing grows with the window; p50 ≤ p99 ≤ max (a longer window contains shorter ones: a violation is a computation bug).
-- failure: {n} row(s) break max swing monotonic in W or p50 ≤ p99 ≤ max
SELECT level, entity, series, window_s, max_swing_w, p50_swing_w, p99_swing_w,
       max(max_swing_w) OVER (PARTITION BY level, entity, series ORDER BY window_s) AS running_max
FROM swing_stats WHERE date = getvariable('partition_date')
QUALIFY max_swing_w < running_max - 1e-3 OR p50_swing_w > p99_swing_w + 1e-3 OR p99_swing_w > max_swing_w + 1e-3
