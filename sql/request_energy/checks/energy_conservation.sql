-- severity: ERROR
-- description: Energy charged to requests + idle energy = measured energy (phase_intervals, from the energy curve) within 0.5 % per endpoint.
-- failure: attributed + idle differs from measured energy by > 0.5 % on {n} endpoint(s)
-- Reads `_charged` (every request that touched the day: request_energy.sql's first statement).
WITH m AS (
    SELECT endpoint, coalesce(sum(energy_j), 0) AS measured_j,
           coalesce(sum(energy_j) FILTER (WHERE phase = 'idle'), 0) AS idle_j
    FROM phase_intervals WHERE date = getvariable('partition_date') GROUP BY ALL
),
a AS (SELECT endpoint, sum(total_j) AS attributed_j FROM _charged GROUP BY ALL)
SELECT m.endpoint, m.measured_j, coalesce(a.attributed_j, 0) AS attributed_j, m.idle_j,
       abs(coalesce(a.attributed_j, 0) + m.idle_j - m.measured_j) / m.measured_j AS relative_error
FROM m LEFT JOIN a USING (endpoint)
WHERE m.measured_j <> 0 AND abs(coalesce(a.attributed_j, 0) + m.idle_j - m.measured_j) / m.measured_j > 0.005
ORDER BY 1
