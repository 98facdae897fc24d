-- severity: WARN
-- description: Every request ran while all GPUs of its endpoint had power samples (power_coverage = 1); where none did, its energies are NULL.
-- failure: requests without full power coverage: {list}
-- Per endpoint: requests with no power at all (energies NULL) and partly covered ones (energies are
-- the measured part), and those requests' mean coverage.
-- Requests that ran while their endpoint held no GPU at all (gpu_assignments) are counted apart:
-- their fix is an assignment, not a sampler.
SELECT endpoint || ': ' || count(*) FILTER (WHERE power_coverage = 0) || ' of ' || any_value(n) || ' request(s) without power (energies null'
       || CASE WHEN count(*) FILTER (WHERE NOT held) > 0
               THEN '; ' || count(*) FILTER (WHERE NOT held) || ' ran while ' || endpoint || ' held no GPU' ELSE '' END || '), '
       || count(*) FILTER (WHERE power_coverage > 0) || ' partly covered; '
       || 'their mean coverage ' || round(100 * avg(power_coverage), 1) || ' %' AS uncovered,
       count(*) AS requests
FROM (
    SELECT e.*, count(*) OVER (PARTITION BY e.endpoint) AS n,
           EXISTS (SELECT 1 FROM gpu_assignments AS a
                   WHERE a.kind = 'endpoint' AND a.name = e.endpoint
                     AND a.from_ns <= epoch_ns(e.arrival_ts) + (e.e2e_ms * 1e6)::BIGINT
                     AND a.to_ns > epoch_ns(e.arrival_ts)) AS held
    FROM request_energy AS e WHERE e.date = getvariable('partition_date')
)
WHERE power_coverage < 1
GROUP BY endpoint
ORDER BY endpoint
