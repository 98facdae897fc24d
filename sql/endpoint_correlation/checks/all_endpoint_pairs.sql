-- severity: WARN
-- description: Every ordered pair of inference endpoints has a row.
-- failure: fewer endpoint pairs than expected: an endpoint reported no complete second?
WITH c AS (
    SELECT (SELECT count(*) FROM endpoint_correlation WHERE date = getvariable('partition_date') AND pair_kind = 'endpoint') AS endpoint_pairs,
           (SELECT count(DISTINCT name) FROM held_gpus('endpoint') WHERE role = 'inference') AS endpoints
)
SELECT endpoint_pairs, endpoints * (endpoints - 1) AS expected FROM c
WHERE endpoint_pairs < endpoints * (endpoints - 1)
