-- severity: WARN
-- description: Every ordered pair of inference endpoints that held GPUs at the same time has a row.
-- failure: fewer endpoint pairs than expected: an endpoint reported no complete second?
WITH held AS (SELECT DISTINCT name, from_ns, to_ns FROM held_gpus('endpoint') WHERE role = 'inference'),
c AS (
    SELECT (SELECT count(*) FROM endpoint_correlation WHERE date = getvariable('partition_date') AND pair_kind = 'endpoint') AS endpoint_pairs,
           (SELECT count(DISTINCT (a.name, b.name)) FROM held AS a JOIN held AS b
                ON a.name <> b.name AND a.from_ns < b.to_ns AND b.from_ns < a.to_ns) AS expected
)
SELECT endpoint_pairs, expected FROM c
WHERE endpoint_pairs < expected
