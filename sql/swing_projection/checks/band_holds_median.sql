-- severity: ERROR
-- description: Each row's median lies inside its band, and the observed members' full sum has no spread.
-- failure: {n} row(s) whose median is outside its band, or whose full observed sum varies by draw
SELECT kind, entity, members, max_2s_swing_pct_low, max_2s_swing_pct, max_2s_swing_pct_high
FROM swing_projection
WHERE date = getvariable('partition_date')
  AND (max_2s_swing_pct NOT BETWEEN max_2s_swing_pct_low AND max_2s_swing_pct_high
       OR p99_2s_swing_pct NOT BETWEEN p99_2s_swing_pct_low AND p99_2s_swing_pct_high
       OR (members = members_observed AND members_read = members_observed
           AND max_2s_swing_pct_high - max_2s_swing_pct_low > 1e-3))
