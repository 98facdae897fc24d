-- coincidence, fleet-day part: role and fleet rows. The sum of the members' 1 s maxima and their
-- mean peak-to-average come from the cluster-days' parts (cluster_role parts for a role, cluster
-- rows for the fleet; the mean weighted by members), the peak of the sum from the rolled-up
-- 1 s series. Reads no per-GPU data.
CREATE OR REPLACE TEMP TABLE _members AS
WITH parts AS (
    SELECT 'role' AS level, part_role(entity) AS entity, sum_of_member_max_1s_w, mean_member_peak_to_avg, members
    FROM coincidence
    WHERE date = getvariable('partition_date') AND level = 'cluster_role'
    UNION ALL
    SELECT 'fleet', c.fleet, s.sum_of_member_max_1s_w, s.mean_member_peak_to_avg, s.members
    FROM coincidence AS s
    JOIN cluster_fleet AS c ON c.cluster = s.entity
    WHERE s.date = getvariable('partition_date') AND s.level = 'cluster'
)
SELECT
    level,
    entity,
    sum(sum_of_member_max_1s_w) AS sum_of_max_w,
    sum(mean_member_peak_to_avg * members) / sum(members) AS mean_member_peak_to_avg,
    sum(members) AS members
FROM parts
GROUP BY ALL;

FROM coincidence_rows('_members')
