-- severity: WARN
-- description: If any endpoint logs requests, every endpoint drawing power does (a fleet without request logs is a supported input: the profile is power only).
-- failure: no requests logged for {n} endpoint(s) while other endpoints log them (no J per token for those)
WITH e AS (
    SELECT entity, sum(requests_per_s) AS r, max(mean_w) AS w FROM diurnal_profile
    WHERE date = getvariable('partition_date') AND dow IS NULL AND role = 'inference' AND entity <> role
    GROUP BY entity
)
SELECT entity AS endpoint_without_requests FROM e
WHERE r = 0 AND w > 0 AND EXISTS (SELECT 1 FROM e WHERE r > 0)
ORDER BY 1
