-- severity: WARN
-- description: Every role in the inventory has a row with a 2 s swing.
-- failure: no power or no complete 2 s window for {n} role(s)
SELECT r.role FROM (SELECT DISTINCT role FROM inventory_gpus) AS r
ANTI JOIN (SELECT role FROM training_vs_inference WHERE date = getvariable('partition_date')
           AND max_2s_swing_pct IS NOT NULL) AS t USING (role)
