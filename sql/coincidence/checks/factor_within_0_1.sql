-- severity: ERROR
-- description: 0 < coincidence factor ≤ 1 (the peak of a sum never exceeds the sum of the peaks).
-- failure: {n} coincidence factor(s) outside (0, 1]
SELECT level, entity, coincidence_factor FROM coincidence
WHERE date = getvariable('partition_date') AND NOT (coincidence_factor > 0 AND coincidence_factor <= 1 + 1e-6)
