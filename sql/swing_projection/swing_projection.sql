-- swing_projection: the kernel's rows (pipeline/assets/swing_projection.py, before= hook
-- `projection`, temp table _projection), dated. Definitions: docs/metrics.md, swing_projection.
SELECT getvariable('partition_date') AS date, kind, entity, members, gpus, gpus_low, gpus_high, method,
    max_2s_swing_pct, max_2s_swing_pct_low, max_2s_swing_pct_high,
    p99_2s_swing_pct, p99_2s_swing_pct_low, p99_2s_swing_pct_high,
    provisioned_w, draws, members_observed, members_read,
    published_scale, published_gpus, published_2s_swing_pct
FROM _projection
ORDER BY kind, entity, members
