-- endpoint_correlation: for each ordered pair of inference endpoints, and of GPUs inside one
-- endpoint (named host/gpu), on 1 s power (power_1s; an endpoint sums its GPUs' means):
--   pearson_1s          correlation at lag 0 over the seconds both report;
--   spike_cooccurrence  share of a's spike seconds with a spike of b within ±1 s, where a spike
--                       second is one in which a GPU (any of the endpoint's) peaks at prefill
--                       level, ≥ 75% of its TDP (decode stays below ~65% on an H200);
--   best_lag_s          the lag L in −10..10 s maximising corr(a(t), b(t + L)) (L > 0: b follows a);
--                       endpoint pairs only (null for GPU pairs, see below).
-- Both orders of a pair are listed, since the co-occurrence share is not symmetric.
CREATE OR REPLACE TEMP TABLE _series AS
WITH g AS (
    SELECT
        i.endpoint, p.host, p.gpu, epoch(p.ts)::BIGINT AS t, p.mean_w, p.max_w >= 0.75 * i.tdp_w AS spike
    FROM power_1s AS p
    JOIN inventory_gpus AS i USING (host, gpu)
    WHERE p.date = getvariable('partition_date') AND i.role = 'inference' AND i.endpoint IS NOT NULL
),
sizes AS (SELECT endpoint, count(DISTINCT (host, gpu)) AS gpus FROM g GROUP BY ALL)
SELECT 'endpoint' AS kind, '' AS grp, endpoint AS e, t, sum(mean_w) AS v, bool_or(spike) AS spike
FROM g JOIN sizes USING (endpoint)
GROUP BY endpoint, t
HAVING count(*) = any_value(gpus)  -- seconds where every GPU of the endpoint reports
UNION ALL
SELECT 'gpu', endpoint, host || '/' || gpu, t, mean_w, spike FROM g;

-- The lag search runs for endpoint pairs only: GPUs of one endpoint run tensor-parallel in
-- lock-step, and 21 lags over every GPU pair would multiply the largest join by 21.
-- Each unordered pair is correlated once (a < b) and mirrored: corr(b(t), a(t + L)) = corr(a(t), b(t − L)).
CREATE OR REPLACE TEMP TABLE _lagged AS
WITH once AS (
    SELECT a.kind, a.e AS a, b.e AS b, l.lag, nullif(corr(a.v, b.v), 'NaN'::DOUBLE) AS r, count(*) AS n  -- flat series: no correlation
    FROM _series AS a
    JOIN range(-10, 11) AS l(lag) ON a.kind = 'endpoint' OR l.lag = 0
    JOIN _series AS b ON b.kind = a.kind AND b.grp = a.grp AND b.t = a.t + l.lag AND b.e > a.e
    GROUP BY ALL
)
SELECT * FROM once
UNION ALL
SELECT kind, b, a, -lag, r, n FROM once;

CREATE OR REPLACE TEMP TABLE _spikes AS
WITH s AS (SELECT kind, grp, e, t FROM _series WHERE spike)
SELECT a.kind, a.e AS a, b.e AS b, count(DISTINCT a.t) AS hits
FROM s AS a
CROSS JOIN range(-1, 2) AS o(off)
JOIN s AS b ON b.kind = a.kind AND b.grp = a.grp AND b.e <> a.e AND b.t = a.t + o.off
GROUP BY ALL;

WITH pairs AS (
    SELECT kind, a, b,
        max(r) FILTER (lag = 0) AS pearson_1s,
        max(n) FILTER (lag = 0) AS seconds,
        CASE WHEN kind = 'endpoint' THEN arg_max(lag, r) FILTER (n >= 60 AND r IS NOT NULL) END AS best_lag_s,
        max(r) FILTER (n >= 60) AS best_lag_r
    FROM _lagged
    GROUP BY kind, a, b
),
spiky AS (
    SELECT kind, e AS a, count(*) FILTER (spike) AS spikes FROM _series GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    p.a,
    p.b,
    p.pearson_1s::FLOAT AS pearson_1s,
    (coalesce(h.hits, 0) / nullif(s.spikes, 0))::FLOAT AS spike_cooccurrence,
    p.best_lag_s::INTEGER AS best_lag_s,
    p.kind AS pair_kind,
    p.best_lag_r::FLOAT AS best_lag_pearson,
    s.spikes AS a_spikes,
    p.seconds::INTEGER AS seconds
FROM pairs AS p
JOIN spiky AS s USING (kind, a)
LEFT JOIN _spikes AS h USING (kind, a, b)
ORDER BY pair_kind DESC, a, b
