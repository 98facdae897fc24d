-- severity: WARN
-- description: No power file of the day is a byte-identical copy of another (copies are quarantined, nothing is lost: clean them up).
-- failure: {n} byte-identical cop(y/ies) quarantined: {list}
SELECT path, reason FROM quarantined_files
WHERE dataset = 'power' AND date = getvariable('partition_date')::VARCHAR AND kind = 'duplicate' AND still_quarantined
ORDER BY path
