SELECT count(DISTINCT endpoint) AS endpoints,
       count(DISTINCT endpoint) FILTER (WHERE phase IS NOT NULL) AS endpoints_with_request_log,
       round(coalesce(avg((phase = 'prefill')::INT) FILTER (WHERE phase <> 'idle'), 0), 4) AS prefill_share_of_busy_time
FROM phase_timeline WHERE date = getvariable('partition_date')
