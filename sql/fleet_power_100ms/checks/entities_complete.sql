-- severity: WARN
-- description: Each host/cluster/role/fleet has ≤ 5% 100 ms slots complete in neither series, instantaneous nor 1 s average (a GPU silent > 100 ms beyond one carried step: those windows are excluded from swings).
-- failure: {n} entit(y/ies) have > 5% incomplete 100 ms slots (a GPU silent > 100 ms): their swings exclude those windows
SELECT entity, round(share, 4) AS share FROM (
    SELECT level || ':' || entity AS entity, avg((NOT (complete OR complete_avg1s))::INT) AS share
    FROM fleet_power_100ms WHERE date = getvariable('partition_date') GROUP BY ALL
) WHERE share > 0.05 ORDER BY share DESC
