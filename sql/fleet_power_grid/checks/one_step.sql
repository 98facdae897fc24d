-- severity: ERROR
-- description: Every row of the day is on one grid step, the setting's (parts built with another step cannot be summed).
-- failure: {n} grid step(s) other than the setting's: {list}
SELECT DISTINCT grid_step_ms FROM fleet_power_grid
WHERE date = getvariable('partition_date') AND grid_step_ms IS DISTINCT FROM getvariable('grid_step_ms')
