-- power_headroom: per power domain (host, cluster) and day, on 2 s means of the domain's summed
-- power (fleet_power_1s, seconds where all its reporting GPUs report): provisioned power, p99,
-- p99.9 and max of the 2 s power, headroom % = 100 × (provisioned − max 2 s) ÷ provisioned, and
-- for clusters an oversubscription estimate, extra_hosts_estimate: the most hosts of the
-- cluster's own profile that can be added while its 2 s power exceeds provisioned for at most
-- getvariable('headroom_exceed_share') of the time (default 0.001 = 0.1%).
--
-- Method (resampling observed host-days): in each of 8 resamples, added host j is a copy of one
-- of the cluster's observed host-days, drawn uniformly (a fixed hash, so reruns agree); a
-- training host is added in step with the job (no time shift: its steps are synchronized), an
-- inference host shifted by a random 0–30 min either way (same time of day, independent
-- bursts), wrapping around the observed span. For each k the added hosts' traces are summed
-- onto the cluster's own trace and the share of 2 s windows above provisioned is averaged over
-- the resamples; the estimate is the largest k whose share stays within the limit (0 if one
-- host already breaks it). k is searched up to the count at which the mean alone would exceed
-- provisioned, plus one, and at most 64. Hosts are null: one cannot add hosts inside a host.
CREATE OR REPLACE TEMP TABLE _p2 AS
WITH full_seconds AS (
    SELECT level, entity, ts, power_w
    FROM fleet_power_1s
    WHERE date = getvariable('partition_date') AND level IN ('host', 'cluster')
    QUALIFY gpus_reporting = max(gpus_reporting) OVER (PARTITION BY level, entity)
)
SELECT level, entity, epoch(ts)::BIGINT // 2 AS t2, avg(power_w) AS w
FROM full_seconds
GROUP BY ALL
HAVING count(*) = 2;

CREATE OR REPLACE TEMP TABLE _draws AS
WITH hosts AS (
    SELECT DISTINCT i.cluster, i.host, i.role FROM inventory_gpus AS i
    SEMI JOIN _p2 AS p ON p.level = 'host' AND p.entity = i.host
),
numbered AS (
    SELECT *, row_number() OVER (PARTITION BY cluster ORDER BY host) - 1 AS idx, count(*) OVER (PARTITION BY cluster) AS n
    FROM hosts
),
means AS (SELECT level, entity, avg(w) AS mean_w FROM _p2 GROUP BY ALL),
bounds AS (
    SELECT
        c.entity AS cluster,
        least(64, greatest(0, ceil((e.provisioned_w - c.mean_w) / avg(h.mean_w)))::INTEGER + 1) AS k_max
    FROM means AS c
    JOIN inventory_entities AS e ON e.level = 'cluster' AND e.entity = c.entity
    JOIN numbered AS nh ON nh.cluster = c.entity
    JOIN means AS h ON h.level = 'host' AND h.entity = nh.host
    WHERE c.level = 'cluster'
    GROUP BY c.entity, e.provisioned_w, c.mean_w
),
slots AS (
    SELECT b.cluster, r.r, j.j, hash(b.cluster, r.r, j.j) AS h
    FROM bounds AS b, range(8) AS r(r), range(1, 65) AS j(j)
    WHERE j.j <= b.k_max
)
SELECT
    s.cluster, s.r, s.j, n.host,
    CASE WHEN n.role = 'inference' THEN (hash(s.h, 'shift') % 1801)::INTEGER - 900 ELSE 0 END AS shift_2s
FROM slots AS s
JOIN numbered AS n ON n.cluster = s.cluster AND n.idx = s.h % n.n;

CREATE OR REPLACE TEMP TABLE _exceed AS
WITH span AS (
    SELECT entity AS host, min(t2) AS t0, max(t2) - min(t2) + 1 AS len FROM _p2 WHERE level = 'host' GROUP BY ALL
),
cluster_t AS (
    SELECT entity AS cluster, t2, w FROM _p2 WHERE level = 'cluster'
),
added AS (
    SELECT d.cluster, d.r, d.j, c.t2, c.w AS base_w, h.w AS host_w
    FROM _draws AS d
    JOIN span AS s USING (host)
    JOIN cluster_t AS c ON c.cluster = d.cluster
    JOIN _p2 AS h ON h.level = 'host' AND h.entity = d.host AND h.t2 = s.t0 + ((c.t2 - s.t0 + d.shift_2s) % s.len + s.len) % s.len
),
loads AS (
    SELECT cluster, r, j, t2, base_w + sum(host_w) OVER (PARTITION BY cluster, r, t2 ORDER BY j) AS load_w
    FROM added
)
SELECT l.cluster, l.j AS k, avg((l.load_w > e.provisioned_w)::INT) AS share_over
FROM loads AS l
JOIN inventory_entities AS e ON e.level = 'cluster' AND e.entity = l.cluster
GROUP BY l.cluster, l.j;

WITH stats AS (
    SELECT level, entity,
        quantile_cont(w, 0.99) AS p99_2s_w, quantile_cont(w, 0.999) AS p999_2s_w, max(w) AS max_2s_w, count(*) AS windows
    FROM _p2 GROUP BY ALL
),
allowed AS (
    SELECT cluster, coalesce(min(k) FILTER (share_over > coalesce(getvariable('headroom_exceed_share'), 0.001)) - 1, max(k)) AS extra
    FROM _exceed GROUP BY ALL
),
base_over AS (
    SELECT entity AS cluster, avg((w > e.provisioned_w)::INT) AS share_over
    FROM _p2 JOIN inventory_entities AS e USING (level, entity) WHERE level = 'cluster' GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    s.level,
    s.entity,
    e.provisioned_w,
    s.p99_2s_w::FLOAT AS p99_2s_w,
    s.p999_2s_w::FLOAT AS p999_2s_w,
    s.max_2s_w::FLOAT AS max_2s_w,
    (100 * (e.provisioned_w - s.max_2s_w) / e.provisioned_w)::FLOAT AS headroom_pct,
    CASE
        WHEN s.level <> 'cluster' THEN NULL
        WHEN b.share_over > coalesce(getvariable('headroom_exceed_share'), 0.001) THEN 0
        ELSE coalesce(a.extra, 0)
    END::INTEGER AS extra_hosts_estimate,
    s.windows::INTEGER AS windows_2s
FROM stats AS s
JOIN inventory_entities AS e USING (level, entity)
LEFT JOIN allowed AS a ON s.level = 'cluster' AND a.cluster = s.entity
LEFT JOIN base_over AS b ON s.level = 'cluster' AND b.cluster = s.entity
ORDER BY s.level, s.entity
