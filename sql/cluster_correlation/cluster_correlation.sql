-- cluster_correlation: for each ordered pair of clusters and day, on their summed 1 s power
-- (fleet_power_1s cluster rows, seconds where all of the cluster's reporting GPUs report):
--   pearson_1s   correlation at lag 0 over the seconds both report;
--   best_lag_s   the lag L in −10..10 s maximising corr(a(t), b(t + L)) (L > 0: b follows a),
--   best_lag_r   and that correlation.
-- Uncorrelated clusters (r near 0) are what lets a fleet's sum stay smooth. Reads only the
-- cluster-days' reduced series.
WITH s AS (
    SELECT entity AS cluster, epoch(ts)::BIGINT AS t, power_w
    FROM fleet_power_1s
    WHERE date = getvariable('partition_date') AND level = 'cluster'
    QUALIFY gpus_reporting = max(gpus_reporting) OVER (PARTITION BY entity)
),
lagged AS (
    SELECT a.cluster AS a, b.cluster AS b, l.lag, corr(a.power_w, b.power_w) AS r, count(*) AS n
    FROM s AS a
    CROSS JOIN range(-10, 11) AS l(lag)
    JOIN s AS b ON b.cluster <> a.cluster AND b.t = a.t + l.lag
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    a AS cluster_a,
    b AS cluster_b,
    (max(r) FILTER (WHERE lag = 0))::FLOAT AS pearson_1s,
    arg_max(lag, r)::INTEGER AS best_lag_s,
    max(r)::FLOAT AS best_lag_r,
    (max(n) FILTER (WHERE lag = 0))::INTEGER AS seconds
FROM lagged
GROUP BY a, b
ORDER BY a, b
