-- severity: ERROR
-- description: −1 ≤ r ≤ 1 and the best lag's r ≥ lag 0's.
-- failure: {n} pair(s) with r outside [-1, 1] or a best lag worse than lag 0
SELECT cluster_a, cluster_b, pearson_1s, best_lag_r FROM cluster_correlation
WHERE date = getvariable('partition_date')
  AND NOT (pearson_1s BETWEEN -1.000001 AND 1.000001 AND best_lag_r >= pearson_1s - 1e-6)
