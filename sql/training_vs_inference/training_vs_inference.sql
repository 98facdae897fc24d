-- training_vs_inference: one row per role and day, the fleet's numbers beside the published
-- reference points (max 2 s swing at cluster level: training up to 37.5%, inference up to 9% of
-- provisioned power). The role level is the sum of all of the role's hosts (a cluster made of
-- them); host_max_2s_swing_pct is the worst single host of that role. Swing columns are on the
-- instantaneous 100 ms trace, the _avg1s column on the driver's 1 s average when present.
WITH ref AS (
    SELECT * FROM (VALUES
        ('training', 37.5, 'published fleet study: synchronized training swings up to 37.5% of provisioned within 2 s'),
        ('inference', 9.0, 'published fleet study: inference swings up to 9% of provisioned within 2 s')
    ) AS r(role, reference_max_2s_swing_pct, reference)
),
swing AS (
    SELECT
        entity AS role,
        max(max_swing_pct) FILTER (series = 'instant') AS max_2s_swing_pct,
        max(max_swing_pct) FILTER (series = 'avg1s') AS max_2s_swing_avg1s_pct,
        max(100 * p50_swing_w / provisioned_w) FILTER (series = 'instant') AS p50_2s_swing_pct,
        max(100 * p99_swing_w / provisioned_w) FILTER (series = 'instant') AS p99_2s_swing_pct,
        max(windows_over_10pct / greatest(windows_complete, 1)) FILTER (series = 'instant') AS share_2s_windows_over_10pct,
        max(windows_over_25pct / greatest(windows_complete, 1)) FILTER (series = 'instant') AS share_2s_windows_over_25pct
    FROM swing_stats
    WHERE date = getvariable('partition_date') AND level = 'role' AND window_s = 2
    GROUP BY ALL
),
hosts AS (
    SELECT i.role, max(s.max_swing_pct) AS host_max_2s_swing_pct
    FROM swing_stats AS s
    JOIN (SELECT DISTINCT host, role FROM inventory_gpus) AS i ON i.host = s.entity
    WHERE s.date = getvariable('partition_date') AND s.level = 'host' AND s.window_s = 2 AND s.series = 'instant'
    GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    p.entity AS role,
    p.max_pct AS peak_pct,
    p.mean_pct,
    p.peak_to_avg,
    s.max_2s_swing_pct,
    s.max_2s_swing_avg1s_pct,
    s.p50_2s_swing_pct::FLOAT AS p50_2s_swing_pct,
    s.p99_2s_swing_pct::FLOAT AS p99_2s_swing_pct,
    s.share_2s_windows_over_10pct::FLOAT AS share_2s_windows_over_10pct,
    s.share_2s_windows_over_25pct::FLOAT AS share_2s_windows_over_25pct,
    h.host_max_2s_swing_pct,
    r.reference_max_2s_swing_pct,
    r.reference,
    p.provisioned_w
FROM power_summary AS p
LEFT JOIN swing AS s ON s.role = p.entity
LEFT JOIN hosts AS h ON h.role = p.entity
LEFT JOIN ref AS r ON r.role = p.entity
WHERE p.date = getvariable('partition_date') AND p.level = 'role'
ORDER BY role
