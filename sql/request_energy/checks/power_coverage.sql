-- severity: WARN
-- description: Every request ran while all GPUs of its endpoint had power samples (power_coverage = 1); where none did, its energies are NULL.
-- failure: requests without full power coverage: {list}
-- Per endpoint: requests with no power at all (energies NULL) and partly covered ones (energies are
-- the measured part), and those requests' mean coverage.
SELECT endpoint || ': ' || count(*) FILTER (WHERE power_coverage = 0) || ' of ' || any_value(n) || ' request(s) without power (energies null), '
       || count(*) FILTER (WHERE power_coverage > 0) || ' partly covered; '
       || 'their mean coverage ' || round(100 * avg(power_coverage), 1) || ' %' AS uncovered,
       count(*) AS requests
FROM (SELECT *, count(*) OVER (PARTITION BY endpoint) AS n FROM request_energy WHERE date = getvariable('partition_date'))
WHERE power_coverage < 1
GROUP BY endpoint
ORDER BY endpoint
