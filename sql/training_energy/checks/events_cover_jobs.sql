-- severity: WARN
-- description: If any job logs events, every job does (a day without any job events is a supported input: every job is labelled from power and its rows say so in `source`).
-- failure: no job_events for {list} while other jobs log them: steps labelled from synchronized power drops
WITH j AS (
    SELECT job, bool_or(source = 'power') AS from_power, bool_or(source = 'job_events') AS logged
    FROM training_energy WHERE date = getvariable('partition_date') GROUP BY job
)
SELECT job FROM j WHERE from_power AND EXISTS (SELECT 1 FROM j WHERE logged) ORDER BY job
