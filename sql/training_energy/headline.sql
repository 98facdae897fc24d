WITH j AS (
    SELECT job, any_value(j_per_step) AS j_per_step, any_value(gap_energy_share) AS gap_energy_share,
           max(boundary_drop_max_w) AS drop_w, any_value(source) AS source
    FROM training_energy WHERE date = getvariable('partition_date') GROUP BY job
)
SELECT map_from_entries(list((job, round(j_per_step::DOUBLE, 0)) ORDER BY job)) AS j_per_step,
       map_from_entries(list((job, round(gap_energy_share::DOUBLE, 3)) ORDER BY job)) AS gap_energy_share,
       map_from_entries(list((job, round(drop_w::DOUBLE, 0)) ORDER BY job)) AS max_boundary_drop_w,
       coalesce(string_agg(job || ': ' || source, ', ' ORDER BY job), '') AS sources
FROM j
