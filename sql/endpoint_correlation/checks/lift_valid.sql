-- severity: ERROR
-- description: Co-occurrence and its chance are shares in [0, 1], and the lift is their ratio.
-- failure: {n} pair(s) with a co-occurrence, chance or lift out of range
SELECT a, b, spike_cooccurrence, spike_chance, spike_lift
FROM endpoint_correlation
WHERE date = getvariable('partition_date')
  AND (spike_cooccurrence NOT BETWEEN 0 AND 1 OR spike_chance NOT BETWEEN 0 AND 1
       OR abs(spike_lift - spike_cooccurrence / spike_chance) > 1e-3 * greatest(spike_lift, 1))
