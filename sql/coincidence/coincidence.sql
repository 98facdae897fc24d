-- coincidence: per host, cluster, role and fleet and day, with the entity's GPUs as members, on
-- 1 s power: coincidence_factor = max of the entity's summed 1 s power ÷ the sum of its GPUs'
-- own 1 s maxima (1.0 = every GPU peaks in the same second; independent loads give less),
-- smoothing_ratio = the sum's peak-to-average ÷ the mean peak-to-average of its GPUs (below 1:
-- the GPUs' peaks cancel out). Seconds where one of the entity's reporting GPUs is missing are
-- left out of the sum. Why 1 s and not 100 ms: at 100 ms every GPU's own ±5–10% sample noise
-- sets its maximum, so the sum of maxima counts noise peaks that never coincide and even a
-- perfectly synchronized training job reads ≈ 0.8; 1 s is also the scale breakers and the
-- published fleet studies work at.
CREATE OR REPLACE TEMP TABLE _members AS
WITH gpu AS (
    SELECT p.host, p.gpu, max(p.mean_w) AS max_w, avg(p.mean_w) AS mean_w
    FROM power_1s AS p
    WHERE p.date = getvariable('partition_date')
    GROUP BY ALL
)
SELECT
    CASE WHEN grouping(i.host) = 0 THEN 'host' WHEN grouping(i.cluster) = 0 THEN 'cluster'
         WHEN grouping(i.role) = 0 THEN 'role' ELSE 'fleet' END AS level,
    coalesce(i.host, i.cluster, i.role, i.fleet) AS entity,
    sum(g.max_w) AS sum_of_max_w,
    avg(g.max_w / nullif(g.mean_w, 0)) AS mean_member_peak_to_avg,
    count(*) AS members
FROM gpu AS g
JOIN inventory_gpus AS i USING (host, gpu)
GROUP BY GROUPING SETS ((i.host), (i.cluster), (i.role), (i.fleet));

FROM coincidence_rows('_members')
