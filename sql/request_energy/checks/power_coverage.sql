-- severity: WARN
-- description: Every request ran while all GPUs of its endpoint had power samples (power_coverage = 1); where none did, its energies are NULL.
-- failure: requests without full power coverage: {list}
-- Per endpoint: requests with no power at all (energies NULL) and partly covered ones (energies are
-- the measured part), and those requests' mean coverage.
-- Requests that ran while their endpoint held no GPU at all (held GPU-time 0 in `_coverage`,
-- request_energy.sql's first statement) are counted apart: their fix is an assignment, not a sampler.
SELECT endpoint || ': ' || count(*) FILTER (WHERE power_coverage = 0) || ' of ' || any_value(n) || ' request(s) without power (energies null'
       || CASE WHEN count(*) FILTER (WHERE NOT held) > 0
               THEN '; ' || count(*) FILTER (WHERE NOT held) || ' ran while ' || endpoint || ' held no GPU' ELSE '' END || '), '
       || count(*) FILTER (WHERE power_coverage > 0) || ' partly covered; '
       || 'their mean coverage ' || round(100 * avg(power_coverage), 1) || ' %' AS uncovered,
       count(*) AS requests
FROM (
    SELECT e.*, count(*) OVER (PARTITION BY e.endpoint) AS n, coalesce(c.held_ns, 0) > 0 AS held
    FROM request_energy AS e LEFT JOIN _coverage AS c USING (request_id, endpoint)
    WHERE e.date = getvariable('partition_date')
)
WHERE power_coverage < 1
GROUP BY endpoint
ORDER BY endpoint
