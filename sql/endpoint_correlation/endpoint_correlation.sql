-- endpoint_correlation: for each ordered pair of inference endpoints, and of GPUs inside one
-- endpoint (named host/gpu), on 1 s power (power_1s; an endpoint sums its GPUs' means):
--   pearson_1s          correlation at lag 0 over the seconds both report;
--   spike_cooccurrence  share of a's spike seconds with a spike of b within ±1 s. A spike second
--                       is an excursion above the series' own level: its 1 s power minus its
--                       mean over the surrounding ±60 s (the local level, which follows the
--                       day) exceeds that excursion's day median by more than 3 robust standard
--                       deviations (3 × 1.4826 × MAD) and by at least 5 % of the series' TDP.
--                       A fixed share of TDP would be crossed by a busy endpoint nearly every
--                       second and say nothing;
--   spike_chance        the co-occurrence chance gives: share of a's seconds with a spike of b
--                       within ±1 s;
--   spike_lift          spike_cooccurrence ÷ spike_chance (1 = independent, ≫ 1 = together);
--   best_lag_s          the lag L in −10..10 s maximising corr(a(t), b(t + L)) (L > 0: b follows a);
--                       endpoint pairs only (null for GPU pairs, see below).
-- Both orders of a pair are listed, since the co-occurrence share is not symmetric.
CREATE OR REPLACE TEMP TABLE _level AS
WITH g AS (  -- each second of a GPU under the endpoint that held it then (held_gpus)
    SELECT
        h.name AS endpoint, p.host, p.gpu, epoch(p.ts)::BIGINT AS t, p.mean_w, h.tdp_w
    FROM power_1s AS p
    JOIN held_gpus('endpoint') AS h
      ON h.host = p.host AND h.gpu = p.gpu AND epoch_ns(p.ts) >= h.from_ns AND epoch_ns(p.ts) < h.to_ns
    WHERE p.date = getvariable('partition_date') AND h.role = 'inference'
),
tdp AS (SELECT endpoint, sum(tdp_w) AS tdp_w FROM (SELECT DISTINCT endpoint, host, gpu, tdp_w FROM g) GROUP BY ALL),
s AS (
    SELECT 'endpoint' AS kind, '' AS grp, endpoint AS e, t, sum(mean_w) AS v, any_value(tdp.tdp_w) AS tdp_w
    FROM g JOIN tdp USING (endpoint)
    GROUP BY endpoint, t
    HAVING count(*) = gpus_held_at('endpoint', endpoint, t * 1000000000)  -- seconds where every GPU the endpoint held reports
    UNION ALL
    SELECT 'gpu', endpoint, host || '/' || gpu, t, mean_w, tdp_w FROM g
),
-- Every second of each series' span, the missing ones with a NULL power (which avg skips), so
-- that the 60 rows either side are the ±60 s: a ROWS frame costs half the RANGE frame, with
-- the grid and its join. The frame holds the same values; the sums of FLOAT watts in a
-- DOUBLE are exact at these magnitudes, so the order the frame adds them in changes nothing.
dense AS (SELECT kind, e, unnest(range(min(t), max(t) + 1)) AS t FROM s GROUP BY kind, e),
level AS (
    SELECT s.kind, s.grp, s.e, s.t, s.v, s.tdp_w,
           s.v - avg(s.v) OVER (PARTITION BY d.kind, d.e ORDER BY d.t ROWS BETWEEN 60 PRECEDING AND 60 FOLLOWING) AS excursion_w
    FROM dense AS d LEFT JOIN s ON s.kind = d.kind AND s.e = d.e AND s.t = d.t
)
SELECT * FROM level WHERE t IS NOT NULL;  -- the seconds the series has

CREATE OR REPLACE TEMP TABLE _series AS
WITH thresholds AS (
    SELECT kind, e, median(excursion_w) AS mid_w, greatest(3 * 1.4826 * mad(excursion_w), 0.05 * any_value(tdp_w)) AS above_w
    FROM _level GROUP BY ALL
)
SELECT l.kind, l.grp, l.e, l.t, l.v, l.excursion_w - h.mid_w > h.above_w AS spike
FROM _level AS l JOIN thresholds AS h USING (kind, e);

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

-- What chance gives: the share of a's seconds that b's spikes cover within ±1 s, whatever a does.
CREATE OR REPLACE TEMP TABLE _chance AS
WITH covered AS (
    SELECT DISTINCT kind, grp, e, t + o.off AS t FROM _series CROSS JOIN range(-1, 2) AS o(off) WHERE spike
)
SELECT a.kind, a.e AS a, c.e AS b, count(*) AS covered_seconds
FROM _series AS a
JOIN covered AS c ON c.kind = a.kind AND c.grp = a.grp AND c.e <> a.e AND c.t = a.t
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
    SELECT kind, e AS a, count(*) FILTER (spike) AS spikes, count(*) AS own_seconds FROM _series GROUP BY ALL
),
shares AS (
    SELECT p.*, s.spikes, coalesce(h.hits, 0) / nullif(s.spikes, 0) AS cooccurrence,
        coalesce(c.covered_seconds, 0) / s.own_seconds AS chance
    FROM pairs AS p
    JOIN spiky AS s USING (kind, a)
    LEFT JOIN _spikes AS h USING (kind, a, b)
    LEFT JOIN _chance AS c USING (kind, a, b)
)
SELECT
    getvariable('partition_date') AS date,
    a,
    b,
    pearson_1s::FLOAT AS pearson_1s,
    cooccurrence::FLOAT AS spike_cooccurrence,
    best_lag_s::INTEGER AS best_lag_s,
    kind AS pair_kind,
    best_lag_r::FLOAT AS best_lag_pearson,
    spikes AS a_spikes,
    seconds::INTEGER AS seconds,
    chance::FLOAT AS spike_chance,
    (cooccurrence / nullif(chance, 0))::FLOAT AS spike_lift
FROM shares
ORDER BY pair_kind DESC, a, b
