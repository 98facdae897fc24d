-- power_cap_whatif: per endpoint, training job, host and cluster and day, for each candidate power
-- cap (getvariable('cap_factors') × each GPU's enforced limit in force: the limit its power samples
-- report, resolved as for energy_per_token (gpu_limit_minutes in sql/views); without any report that
-- day, the inventory's power_limit_w, else its TDP) and phase, what the day's 1 s means (power_1s) say about running under that cap.
-- A GPU's power limit acts on averaged power, so everything here works on each GPU's 1 s means P̄.
--
-- Phase of a GPU-second: endpoints from the exact intervals of phase_intervals (a second split
-- between phases counts in each by its overlap: prefill, decode, idle; a second outside the
-- endpoint's intervals is 'unlabelled'; a phase_intervals not built yet reads empty, pipeline/scope.py
-- ALWAYS_DEFINED: every endpoint second 'unlabelled'); training jobs from job_events on the GPU's host ('step'
-- events vs the 'rest' of the second); 'all' is every second. Host and cluster rows are 'all' only.
--
-- Observed, per cap c (each GPU-second with phase weight x, energy e = power_1s.energy_j):
--   time_above_share    Σ x·[P̄ > c] / Σ x             energy_above_share  Σ x·e·[P̄ > c] / Σ x·e
--   energy_above_cap_j  Σ x·max(P̄ − c, 0)·1 s
-- Estimated (docs/serving.md): a second with P̄ > c runs at c and lasts (P̄/c)^α s, so its energy
-- becomes c·(P̄/c)^α; other seconds are unchanged. α per GPU model (_cap_alpha: a published anchor,
-- a configured value, or 'uncalibrated'), with its low/high range giving the *_low/_high columns.
-- At c = the enforced limit (cap_factor 1) the estimate is the observed day by definition: the GPU
-- already runs under it (its 1 s means that overshoot the limit are what it did). Below it, a
-- second's P̄ (overshoot included) is its demand and the capped second draws exactly c.
-- Provisioned side (host, cluster rows): the summed capped 1 s power (min(P̄, c) per GPU; the
-- observed power at cap_factor 1), its 2 s means over seconds where all the entity's reporting
-- GPUs report, their p99 and max, and extra_hosts_at_cap: hosts of the cluster's mean capped host
-- power (Σ caps of its GPUs) that fit under provisioned power on top of the max 2 s, all drawing
-- their caps at once (a bound, not a resample).

CREATE OR REPLACE TEMP TABLE _cap_factors AS
SELECT DISTINCT round(trim(f)::DOUBLE, 6) AS cap_factor
FROM unnest(string_split(coalesce(getvariable('cap_factors'), '1.0,0.9,0.8,0.7,0.6') || ',1.0', ',')) AS t(f)
WHERE trim(f) <> '';

-- α per GPU model: the configured override (getvariable('cap_alpha'): 'KEY=alpha:low:high;…', KEY
-- matched case-insensitively inside the model name) first, then the published anchors, else uncalibrated.
CREATE OR REPLACE TEMP TABLE _cap_alpha AS
WITH published(key, alpha, alpha_low, alpha_high, alpha_source) AS (VALUES
    ('A100', 0.18, 0.16, 0.27,
     'published: Samsi et al. 2023 (From Words to Watts), A100 250→175 W: −23 % energy, +6–7 % latency')
),
configured AS (
    SELECT upper(trim(split_part(item, '=', 1))) AS key,
           split_part(split_part(item, '=', 2), ':', 1)::DOUBLE AS alpha,
           coalesce(nullif(split_part(split_part(item, '=', 2), ':', 2), '')::DOUBLE, split_part(split_part(item, '=', 2), ':', 1)::DOUBLE) AS alpha_low,
           coalesce(nullif(split_part(split_part(item, '=', 2), ':', 3), '')::DOUBLE, split_part(split_part(item, '=', 2), ':', 1)::DOUBLE) AS alpha_high,
           'configured' AS alpha_source
    FROM unnest(string_split(coalesce(getvariable('cap_alpha'), ''), ';')) AS t(item)
    WHERE trim(item) <> ''
),
models AS (SELECT DISTINCT coalesce(gpu_model, 'unknown') AS gpu_model FROM inventory_gpus)
SELECT m.gpu_model,
       coalesce(c.alpha, p.alpha, 0.18) AS alpha,
       coalesce(c.alpha_low, p.alpha_low, 0.1) AS alpha_low,
       coalesce(c.alpha_high, p.alpha_high, 1.0) AS alpha_high,
       coalesce(c.alpha_source, p.alpha_source, 'uncalibrated: the A100 anchor with a wide range (no measurement for this model)') AS alpha_source
FROM models AS m
LEFT JOIN LATERAL (SELECT * FROM configured WHERE contains(upper(m.gpu_model), key) ORDER BY length(key) DESC LIMIT 1) AS c ON true
LEFT JOIN LATERAL (SELECT * FROM published WHERE contains(upper(m.gpu_model), key) ORDER BY length(key) DESC LIMIT 1) AS p ON true;

CREATE OR REPLACE TEMP TABLE _cap_gpu_limits AS SELECT * FROM gpu_limit_minutes;

-- each GPU-second of the day with the workload that held its GPU then (held_gpus), its model and
-- enforced limit (the one reported in force at the second's start, else the GPU's first report of
-- the day, else inventory, else TDP)
CREATE OR REPLACE TEMP TABLE _cap_s AS
SELECT p.host, p.gpu, epoch_ns(p.ts) // 1000000000 AS sec, p.mean_w::DOUBLE AS w, p.energy_j AS e,
       i.cluster, he.name AS endpoint, hj.name AS job, coalesce(i.gpu_model, 'unknown') AS gpu_model,
       coalesce(l.limit_w, f.first_w, i.power_limit_w, i.tdp_w)::DOUBLE AS limit_w,
       CASE WHEN coalesce(l.limit_w, f.first_w) IS NOT NULL THEN 'reported'
            WHEN i.power_limit_w IS NOT NULL THEN 'inventory' ELSE 'tdp' END AS limit_source
FROM power_1s AS p
JOIN inventory_gpus AS i USING (host, gpu)
LEFT JOIN held_gpus('endpoint') AS he
  ON he.host = p.host AND he.gpu = p.gpu AND epoch_ns(p.ts) >= he.from_ns AND epoch_ns(p.ts) < he.to_ns
LEFT JOIN held_gpus('job') AS hj
  ON hj.host = p.host AND hj.gpu = p.gpu AND epoch_ns(p.ts) >= hj.from_ns AND epoch_ns(p.ts) < hj.to_ns
LEFT JOIN (SELECT host, gpu, arg_min(limit_w, from_ns) AS first_w FROM _cap_gpu_limits GROUP BY ALL) AS f USING (host, gpu)
ASOF LEFT JOIN _cap_gpu_limits AS l ON l.host = p.host AND l.gpu = p.gpu AND epoch_ns(p.ts) >= l.from_ns
WHERE p.date = getvariable('partition_date') AND p.mean_w IS NOT NULL;

-- phase weights of each second: an interval [a, b) gives second s the overlap of [s, s + 1 s)
CREATE OR REPLACE TEMP TABLE _cap_labels AS
WITH ep AS (
    SELECT endpoint, phase, start_ns, end_ns, unnest(range(start_ns // 1000000000, (end_ns - 1) // 1000000000 + 1)) AS sec
    FROM phase_intervals
    WHERE date = getvariable('partition_date') AND end_ns > start_ns
),
ep_w AS (
    SELECT endpoint, sec, phase,
           sum(least(end_ns, (sec + 1) * 1000000000) - greatest(start_ns, sec * 1000000000)) / 1e9 AS weight
    FROM ep GROUP BY ALL
),
steps AS (
    SELECT job, host, epoch_ns(start_ts) AS start_ns, epoch_ns(end_ts) AS end_ns,
           unnest(range(epoch_ns(start_ts) // 1000000000, (epoch_ns(end_ts) - 1) // 1000000000 + 1)) AS sec
    FROM job_events
    WHERE date = getvariable('partition_date') AND kind = 'step' AND end_ts > start_ts
),
step_w AS (
    SELECT job, host, sec, 'step' AS phase,
           least(sum(least(end_ns, (sec + 1) * 1000000000) - greatest(start_ns, sec * 1000000000)) / 1e9, 1.0) AS weight
    FROM steps GROUP BY ALL
)
SELECT s.host, s.gpu, s.sec, w.phase, w.weight
FROM _cap_s AS s JOIN ep_w AS w ON w.endpoint = s.endpoint AND w.sec = s.sec
UNION ALL
SELECT s.host, s.gpu, s.sec, w.phase, w.weight
FROM _cap_s AS s JOIN step_w AS w ON w.job = s.job AND w.host = s.host AND w.sec = s.sec;

-- median() of the values a histogram (value -> count) counts, each times factor: the middle one or
-- the mean of the two middle ones, the same DOUBLE as median() over the values themselves, from a
-- few distinct limits per row instead of every GPU-second's
CREATE OR REPLACE TEMP MACRO _cap_nth(h, p) AS  -- h's p-th value (from 0) in ascending order
    list_filter(list_sort(map_entries(h)),
                lambda e, i: list_sum(list_transform(list_sort(map_entries(h))[1:i], lambda x: x.value)) > p)[1].key;

CREATE OR REPLACE TEMP MACRO _cap_median(h, factor) AS
    (factor * _cap_nth(h, (list_sum(map_values(h)) - 1) // 2) + factor * _cap_nth(h, list_sum(map_values(h)) // 2)) / 2;

-- every GPU-second once per (level, entity, phase) it counts in, with its weight: a view, not kept
-- (a few rows per GPU-second, the largest intermediate of the step), streamed into _cap_rows
CREATE OR REPLACE TEMP VIEW _cap_weighted AS
WITH labelled AS (  -- per GPU-second: the weight its labels cover
    SELECT host, gpu, sec, sum(weight) AS weight FROM _cap_labels GROUP BY ALL
)
SELECT lv.level, lv.entity, l.phase, l.weight, s.host, s.gpu, s.w, s.e, s.gpu_model, s.limit_w, s.limit_source
FROM _cap_s AS s JOIN _cap_labels AS l USING (host, gpu, sec)
CROSS JOIN LATERAL (VALUES ('endpoint', s.endpoint), ('job', s.job)) AS lv(level, entity)
WHERE lv.entity IS NOT NULL
UNION ALL  -- the rest of each second of an endpoint's or job's GPU
SELECT lv.level, lv.entity, CASE WHEN s.endpoint IS NOT NULL THEN 'unlabelled' ELSE 'rest' END,
       1.0 - coalesce(l.weight, 0), s.host, s.gpu, s.w, s.e, s.gpu_model, s.limit_w, s.limit_source
FROM _cap_s AS s LEFT JOIN labelled AS l USING (host, gpu, sec)
CROSS JOIN LATERAL (VALUES ('endpoint', s.endpoint), ('job', s.job)) AS lv(level, entity)
WHERE lv.entity IS NOT NULL AND 1.0 - coalesce(l.weight, 0) > 1e-9
UNION ALL
SELECT lv.level, lv.entity, 'all', 1.0, s.host, s.gpu, s.w, s.e, s.gpu_model, s.limit_w, s.limit_source
FROM _cap_s AS s
CROSS JOIN LATERAL (VALUES ('endpoint', s.endpoint), ('job', s.job), ('host', s.host), ('cluster', s.cluster)) AS lv(level, entity)
WHERE lv.entity IS NOT NULL OR lv.level IN ('host', 'cluster');

-- What does not depend on the cap is summed once per (level, entity, phase); per cap only the
-- seconds above it are read (a second at or below the cap adds 0 to the time and energy above it
-- and its own energy and time to the estimates). The sums are exact (DECIMAL, as xsum), so "all
-- seconds, less those above, plus their estimate" is, to the last digit, the sum over every second
-- of what each adds.
CREATE OR REPLACE TEMP TABLE _cap_rows AS
WITH parts AS (  -- one pass: each row once whatever the cap (cap_factor NULL), and once per cap it is above
    SELECT x.level, x.entity, x.phase, f.cap_factor, x.host, x.gpu, x.gpu_model, x.limit_w, x.limit_source,
           count(*) AS seconds_n,
           sum(x.weight::DECIMAL(38, 12)) AS gpu_seconds,
           sum((x.weight * x.e)::DECIMAL(38, 12)) AS energy_j,
           sum((x.weight * greatest(x.w - f.cap_factor * x.limit_w, 0))::DECIMAL(38, 12)) AS energy_above_cap_j,
           sum((x.weight * (f.cap_factor * x.limit_w * pow(x.w / (f.cap_factor * x.limit_w), a.alpha)))::DECIMAL(38, 12)) AS est_energy_j,
           sum((x.weight * (f.cap_factor * x.limit_w * pow(x.w / (f.cap_factor * x.limit_w), a.alpha_low)))::DECIMAL(38, 12)) AS est_energy_low_j,
           sum((x.weight * (f.cap_factor * x.limit_w * pow(x.w / (f.cap_factor * x.limit_w), a.alpha_high)))::DECIMAL(38, 12)) AS est_energy_high_j,
           sum((x.weight * pow(x.w / (f.cap_factor * x.limit_w), a.alpha))::DECIMAL(38, 12)) AS est_gpu_seconds,
           sum((x.weight * pow(x.w / (f.cap_factor * x.limit_w), a.alpha_low))::DECIMAL(38, 12)) AS est_gpu_seconds_low,
           sum((x.weight * pow(x.w / (f.cap_factor * x.limit_w), a.alpha_high))::DECIMAL(38, 12)) AS est_gpu_seconds_high
    FROM _cap_weighted AS x
    CROSS JOIN (SELECT NULL::DOUBLE AS cap_factor UNION ALL SELECT cap_factor FROM _cap_factors) AS f
    JOIN _cap_alpha AS a USING (gpu_model)
    WHERE f.cap_factor IS NULL OR x.w > f.cap_factor * x.limit_w
    GROUP BY ALL
),
limits AS (  -- per (level, entity, phase): how many of its rows have each enforced limit (histogram())
    SELECT level, entity, phase, limit_w, sum(seconds_n)::UBIGINT AS n FROM parts WHERE cap_factor IS NULL GROUP BY ALL
),
whole AS (  -- per (level, entity, phase), whatever the cap
    SELECT p.level, p.entity, p.phase,
           sum(p.gpu_seconds) AS gpu_seconds,
           sum(p.energy_j) AS energy_j,
           CASE WHEN count(DISTINCT p.gpu_model) = 1 THEN any_value(p.gpu_model) ELSE 'mixed' END AS gpu_model,
           count(DISTINCT (p.host, p.gpu))::INTEGER AS gpus,
           any_value(m.limits) AS limits,
           string_agg(DISTINCT p.limit_source, '; ' ORDER BY p.limit_source) AS limit_source,
           CASE WHEN count(DISTINCT a.alpha) = 1 THEN any_value(a.alpha) END AS alpha,
           min(a.alpha_low) AS alpha_low,
           max(a.alpha_high) AS alpha_high,
           string_agg(DISTINCT a.alpha_source, '; ' ORDER BY a.alpha_source) AS alpha_source
    FROM parts AS p JOIN _cap_alpha AS a USING (gpu_model)
    JOIN (SELECT level, entity, phase, map(list(limit_w ORDER BY limit_w), list(n ORDER BY limit_w)) AS limits FROM limits GROUP BY ALL) AS m
      ON m.level = p.level AND m.entity IS NOT DISTINCT FROM p.entity AND m.phase = p.phase
    WHERE p.cap_factor IS NULL
    GROUP BY p.level, p.entity, p.phase
),
above AS (  -- per cap, the seconds whose 1 s mean is above it (below 1, each stretched: P̄ > c runs at c)
    SELECT level, entity, phase, cap_factor, sum(seconds_n) AS seconds_n, sum(gpu_seconds) AS gpu_seconds, sum(energy_j) AS energy_j,
           sum(energy_above_cap_j) AS energy_above_cap_j, sum(est_energy_j) AS est_energy_j, sum(est_energy_low_j) AS est_energy_low_j,
           sum(est_energy_high_j) AS est_energy_high_j, sum(est_gpu_seconds) AS est_gpu_seconds,
           sum(est_gpu_seconds_low) AS est_gpu_seconds_low, sum(est_gpu_seconds_high) AS est_gpu_seconds_high
    FROM parts WHERE cap_factor IS NOT NULL GROUP BY ALL
),
capped AS (  -- whole, less the seconds above the cap, plus their estimate (exact: DECIMAL)
    SELECT h.*, f.cap_factor,
           coalesce(o.gpu_seconds, 0) AS above_s,
           coalesce(o.energy_j, 0) AS above_j,  -- (NULL only where energy_j is: all energy NULL)
           coalesce(o.energy_above_cap_j, 0) AS above_cap_j,
           f.cap_factor < 1 AND o.seconds_n IS NOT NULL AS stretched,
           o.energy_j AS str_j, o.gpu_seconds AS str_s,
           o.est_energy_j AS str_est_j, o.est_energy_low_j AS str_est_low_j, o.est_energy_high_j AS str_est_high_j,
           o.est_gpu_seconds AS str_est_s, o.est_gpu_seconds_low AS str_est_low_s, o.est_gpu_seconds_high AS str_est_high_s
    FROM whole AS h CROSS JOIN _cap_factors AS f
    LEFT JOIN above AS o ON o.level = h.level AND o.entity IS NOT DISTINCT FROM h.entity AND o.phase = h.phase AND o.cap_factor = f.cap_factor
)
SELECT level, entity, phase, cap_factor, gpu_model, gpus,
       _cap_median(limits, 1.0) AS enforced_limit_w,
       limit_source,
       _cap_median(limits, cap_factor) AS cap_w,
       gpu_seconds::DOUBLE AS gpu_seconds,
       energy_j::DOUBLE AS energy_j,
       above_s::DOUBLE / nullif(gpu_seconds::DOUBLE, 0) AS time_above_share,
       above_j::DOUBLE / nullif(energy_j::DOUBLE, 0) AS energy_above_share,
       above_cap_j::DOUBLE AS energy_above_cap_j,
       alpha, alpha_low, alpha_high, alpha_source,
       (CASE WHEN NOT stretched THEN energy_j WHEN energy_j IS NULL THEN str_est_j ELSE energy_j - coalesce(str_j, 0) + str_est_j END)::DOUBLE AS est_energy_j,
       (CASE WHEN NOT stretched THEN energy_j WHEN energy_j IS NULL THEN str_est_low_j ELSE energy_j - coalesce(str_j, 0) + str_est_low_j END)::DOUBLE AS est_energy_low_j,
       (CASE WHEN NOT stretched THEN energy_j WHEN energy_j IS NULL THEN str_est_high_j ELSE energy_j - coalesce(str_j, 0) + str_est_high_j END)::DOUBLE AS est_energy_high_j,
       (CASE WHEN NOT stretched THEN gpu_seconds ELSE gpu_seconds - str_s + str_est_s END)::DOUBLE AS est_gpu_seconds,
       (CASE WHEN NOT stretched THEN gpu_seconds ELSE gpu_seconds - str_s + str_est_low_s END)::DOUBLE AS est_gpu_seconds_low,
       (CASE WHEN NOT stretched THEN gpu_seconds ELSE gpu_seconds - str_s + str_est_high_s END)::DOUBLE AS est_gpu_seconds_high
FROM capped;

-- the provisioned side: summed capped power of hosts and clusters, 2 s means over full seconds
CREATE OR REPLACE TEMP TABLE _cap_power AS
WITH summed AS (
    SELECT lv.level, lv.entity, f.cap_factor, x.sec,
           sum(CASE WHEN f.cap_factor < 1 THEN least(x.w, f.cap_factor * x.limit_w) ELSE x.w END) AS w,
           count(*) AS gpus
    FROM _cap_s AS x CROSS JOIN LATERAL (VALUES ('host', x.host), ('cluster', x.cluster)) AS lv(level, entity)
    CROSS JOIN _cap_factors AS f
    GROUP BY ALL
),
full_seconds AS (
    SELECT * FROM summed QUALIFY gpus = max(gpus) OVER (PARTITION BY level, entity, cap_factor)
),
two_s AS (
    SELECT level, entity, cap_factor, sec // 2 AS t2, avg(w) AS w FROM full_seconds GROUP BY ALL HAVING count(*) = 2
)
SELECT level, entity, cap_factor, quantile_cont(w, 0.99) AS p99_2s_w, max(w) AS max_2s_w, count(*) AS windows_2s
FROM two_s GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _cap_host_w AS  -- per cluster: its hosts' mean Σ caps
SELECT i.cluster, f.cap_factor, avg(h.host_cap_w) AS host_cap_w
FROM (SELECT g.cluster, g.host, sum(coalesce(s.limit_w, g.power_limit_w, g.tdp_w)) AS host_limit_w
      FROM inventory_gpus AS g  -- each GPU's limit of the day (the median over its seconds), else inventory, else TDP
      LEFT JOIN (SELECT host, gpu, median(limit_w) AS limit_w FROM _cap_s GROUP BY ALL) AS s USING (host, gpu)
      GROUP BY ALL) AS i
CROSS JOIN _cap_factors AS f
CROSS JOIN LATERAL (SELECT f.cap_factor * i.host_limit_w AS host_cap_w) AS h
GROUP BY ALL;

SELECT
    getvariable('partition_date') AS date,
    r.level,
    r.entity,
    r.phase,
    r.cap_factor,
    r.cap_w::FLOAT AS cap_w,
    r.enforced_limit_w::FLOAT AS enforced_limit_w,
    r.limit_source,
    r.gpu_model,
    r.gpus,
    r.gpu_seconds,
    r.energy_j,
    r.time_above_share,
    r.energy_above_share,
    r.energy_above_cap_j,
    r.alpha,
    r.alpha_low,
    r.alpha_high,
    r.alpha_source,
    r.est_energy_j,
    r.est_energy_low_j,
    r.est_energy_high_j,
    r.est_gpu_seconds,
    r.est_gpu_seconds_low,
    r.est_gpu_seconds_high,
    100 * (r.est_energy_j / nullif(r.energy_j, 0) - 1) AS est_energy_change_pct,
    100 * (r.est_gpu_seconds / nullif(r.gpu_seconds, 0) - 1) AS est_duration_change_pct,
    e.provisioned_w,
    p.p99_2s_w::FLOAT AS p99_2s_w,
    p.max_2s_w::FLOAT AS max_2s_w,
    CASE WHEN r.level = 'cluster' AND p.max_2s_w IS NOT NULL AND hw.host_cap_w > 0
         THEN greatest(floor((e.provisioned_w - p.max_2s_w) / hw.host_cap_w), 0) END::INTEGER AS extra_hosts_at_cap
FROM _cap_rows AS r
LEFT JOIN _cap_power AS p USING (level, entity, cap_factor)
LEFT JOIN inventory_entities AS e ON r.level IN ('host', 'cluster') AND e.level = r.level AND e.entity = r.entity
LEFT JOIN _cap_host_w AS hw ON r.level = 'cluster' AND hw.cluster = r.entity AND hw.cap_factor = r.cap_factor
ORDER BY r.level, r.entity, r.phase, r.cap_factor DESC
