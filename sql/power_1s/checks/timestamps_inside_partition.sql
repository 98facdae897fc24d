-- severity: ERROR
-- description: Every sample's ts lies inside its date= partition (UTC).
-- failure: {list} sample(s) outside the day
SELECT count(*) AS rows_outside_day FROM power
WHERE date = getvariable('partition_date') AND (ts < day_start() OR ts >= day_end())
HAVING count(*) > 0
