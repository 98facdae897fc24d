-- severity: WARN
-- description: ≤ 5% of each entity's 2 s windows are incomplete.
-- failure: {n} entit(y/ies) lose > 5% of their 2 s windows to missing samples: {list}
WITH s AS (
    SELECT level || ':' || entity AS entity,
           windows_incomplete / greatest(windows_complete + windows_incomplete, 1) AS share
    FROM swing_stats WHERE date = getvariable('partition_date') AND window_s = 2 AND series = 'instant'
)
SELECT entity, round(share, 4) AS share FROM s WHERE share > 0.05
UNION ALL
SELECT 'no swing rows', NULL WHERE NOT EXISTS (SELECT 1 FROM s)
ORDER BY share DESC NULLS FIRST
