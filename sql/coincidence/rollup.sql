-- coincidence, fleet-day part: role and fleet rows. The sum of the members' 1 s maxima and their
-- mean peak-to-average come from the cluster-days' parts (cluster_role parts for a role, cluster
-- rows for the fleet; the mean weighted by members), the peak of the sum from the rolled-up
-- 1 s series. Reads no per-GPU data.
CREATE OR REPLACE TEMP TABLE _members AS
SELECT
    level,
    entity,
    sum(sum_of_member_max_1s_w) AS sum_of_max_w,
    sum(mean_member_peak_to_avg * members) / sum(members) AS mean_member_peak_to_avg,
    sum(members) AS members
FROM cluster_parts('coincidence')
GROUP BY ALL;

FROM coincidence_rows('_members')
