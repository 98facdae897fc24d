-- severity: ERROR
-- description: Lag-0 correlation is symmetric and within [−1, 1]; best lags mirror (corr(a, b(t+L)) = corr(b, a(t−L))).
-- failure: {n} pair(s) whose correlation differs by order or lies outside [−1, 1]
SELECT x.a, x.b, x.pearson_1s, y.pearson_1s, x.best_lag_s, y.best_lag_s
FROM endpoint_correlation AS x JOIN endpoint_correlation AS y ON x.a = y.b AND x.b = y.a AND x.date = y.date
WHERE x.date = getvariable('partition_date')
  AND (abs(x.pearson_1s - y.pearson_1s) > 1e-4 OR abs(x.pearson_1s) > 1 + 1e-4 OR x.best_lag_s <> -y.best_lag_s)
