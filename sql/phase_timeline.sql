-- phase_timeline: per endpoint GPU (inventory) and 100 ms slot of the partition day.
--   power_w / energy_j : the slot's mean power (power_100ms); a slot without samples is linearly
--                        interpolated from its neighbours ≤ 1 s apart (250 ms and 1 s sources), else NULL.
--   n_prefill, n_decode: requests of the endpoint in prefill / decode during the slot (any overlap).
--   phase              : 'prefill' if n_prefill > 0, else 'decode' if n_decode > 0, else 'idle';
--                        NULL when the endpoint has no request log that day.
--   prefill_estimated  : a request in prefill here had no prefill_start_ts (fallback used).
--   prompt_tokens, output_tokens: the endpoint's tokens processed in the slot (each request's
--                        tokens spread evenly over its phase interval).
--   power_phase        : the power-only label (hysteresis, see docs/phases.md), for every endpoint.
-- Request state is a sweep over interval events (+/- at the first/last slot, token rates over the
-- interior, partial edge slots), looked up per slot with an ASOF join: linear in slots + requests.
WITH gpus AS (
    SELECT endpoint, host, gpu, tdp_w FROM inventory_gpus WHERE endpoint IS NOT NULL
),
pw AS (
    SELECT g.endpoint, p.host, p.gpu, slot_of(p.ts) AS slot, p.power_w::DOUBLE AS power_w
    FROM power_100ms AS p JOIN gpus AS g USING (host, gpu)
    WHERE p.date = getvariable('partition_date') AND p.power_w IS NOT NULL
),
span AS (
    SELECT endpoint, min(slot) AS lo, max(slot) AS hi FROM pw GROUP BY ALL
),
ep_grid AS (
    SELECT endpoint, unnest(range(lo, hi + 1)) AS slot FROM span
),
filled AS (
    SELECT g.endpoint, g.host, g.gpu, g.tdp_w, e.slot, pw.power_w,
           last_value(pw.power_w IGNORE NULLS) OVER before AS prev_w,
           last_value(CASE WHEN pw.power_w IS NOT NULL THEN e.slot END IGNORE NULLS) OVER before AS prev_slot,
           first_value(pw.power_w IGNORE NULLS) OVER after AS next_w,
           first_value(CASE WHEN pw.power_w IS NOT NULL THEN e.slot END IGNORE NULLS) OVER after AS next_slot
    FROM ep_grid AS e
    JOIN gpus AS g USING (endpoint)
    LEFT JOIN pw USING (endpoint, host, gpu, slot)
    WINDOW before AS (PARTITION BY g.host, g.gpu ORDER BY e.slot ROWS BETWEEN 10 PRECEDING AND CURRENT ROW),
           after AS (PARTITION BY g.host, g.gpu ORDER BY e.slot ROWS BETWEEN CURRENT ROW AND 10 FOLLOWING)
),
held AS (  -- a slot without samples interpolates linearly between the GPU's neighbouring slots less
           -- than 1 s apart (250 ms and 1 s sources), or takes the one neighbour within 1 s, else NULL
    SELECT endpoint, host, gpu, tdp_w, slot,
           CASE
               WHEN power_w IS NOT NULL THEN power_w
               WHEN prev_w IS NOT NULL AND next_w IS NOT NULL AND next_slot - prev_slot <= 10
                   THEN prev_w + (next_w - prev_w) * (slot - prev_slot) / (next_slot - prev_slot)
               WHEN prev_w IS NOT NULL AND slot - prev_slot < 10 AND next_w IS NULL THEN prev_w
               WHEN next_w IS NOT NULL AND next_slot - slot < 10 AND prev_w IS NULL THEN next_w
           END AS power_w
    FROM filled
),
ev AS (
    SELECT endpoint, phase, sa AS slot, 1 AS dn, estimated::INT AS dest, 0.0 AS drate,
           rate * (least(b_ns, (sa + 1) * 100000000) - a_ns) AS edge
    FROM request_intervals
    UNION ALL
    SELECT endpoint, phase, sb + 1, -1, -estimated::INT, 0.0, 0.0 FROM request_intervals
    UNION ALL
    SELECT endpoint, phase, sb, 0, 0, 0.0, rate * (b_ns - sb * 100000000) FROM request_intervals WHERE sb > sa
    UNION ALL
    SELECT endpoint, phase, sa + 1, 0, 0, rate, 0.0 FROM request_intervals WHERE sb > sa
    UNION ALL
    SELECT endpoint, phase, sb, 0, 0, -rate, 0.0 FROM request_intervals WHERE sb > sa
),
ev_slot AS (
    SELECT endpoint, slot,
           coalesce(sum(dn) FILTER (WHERE phase = 'prefill'), 0) AS dn_pre,
           coalesce(sum(dn) FILTER (WHERE phase = 'decode'), 0) AS dn_dec,
           coalesce(sum(dest), 0) AS dest,
           coalesce(sum(drate) FILTER (WHERE phase = 'prefill'), 0) AS drate_pre,
           coalesce(sum(drate) FILTER (WHERE phase = 'decode'), 0) AS drate_dec,
           coalesce(sum(edge) FILTER (WHERE phase = 'prefill'), 0) AS edge_pre,
           coalesce(sum(edge) FILTER (WHERE phase = 'decode'), 0) AS edge_dec
    FROM ev GROUP BY ALL
),
state AS (
    SELECT endpoint, slot, edge_pre, edge_dec,
           sum(dn_pre) OVER w AS n_prefill, sum(dn_dec) OVER w AS n_decode, sum(dest) OVER w AS n_estimated,
           sum(drate_pre) OVER w AS rate_pre, sum(drate_dec) OVER w AS rate_dec
    FROM ev_slot
    WINDOW w AS (PARTITION BY endpoint ORDER BY slot ROWS UNBOUNDED PRECEDING)
),
ep_state AS (
    SELECT e.endpoint, e.slot,
           coalesce(s.n_prefill, 0)::INTEGER AS n_prefill,
           coalesce(s.n_decode, 0)::INTEGER AS n_decode,
           coalesce(s.n_estimated, 0) > 0 AS prefill_estimated,
           greatest(coalesce(s.rate_pre * 100000000 + CASE WHEN s.slot = e.slot THEN s.edge_pre ELSE 0 END, 0), 0) AS prompt_tokens,
           greatest(coalesce(s.rate_dec * 100000000 + CASE WHEN s.slot = e.slot THEN s.edge_dec ELSE 0 END, 0), 0) AS output_tokens,
           e.endpoint IN (SELECT endpoint FROM request_phases) AS logged
    FROM ep_grid AS e ASOF LEFT JOIN state AS s ON e.endpoint = s.endpoint AND e.slot >= s.slot
),
idle_floor AS (  -- 5th percentile, capped at 25 % of TDP for captures that are never idle
    SELECT p.host, p.gpu, least(quantile_cont(p.power_w, 0.05), 0.25 * any_value(g.tdp_w)) AS idle_w
    FROM pw AS p JOIN gpus AS g USING (host, gpu) GROUP BY ALL
),
busy AS (
    SELECT h.host, h.gpu, h.slot // 36000 AS hour, h.power_w
    FROM held AS h JOIN idle_floor AS q USING (host, gpu)
    WHERE h.power_w > q.idle_w + 0.05 * (h.tdp_w - q.idle_w)
),
active AS (
    SELECT h.host, h.gpu, h.hour, any_value(h.tdp_w) AS tdp_w, any_value(q.idle_w) AS idle_w,
           count(b.power_w) AS n_active, median(b.power_w) AS active_w
    FROM (SELECT DISTINCT host, gpu, tdp_w, slot // 36000 AS hour FROM held) AS h
    JOIN idle_floor AS q USING (host, gpu)
    LEFT JOIN busy AS b ON b.host = h.host AND b.gpu = h.gpu AND b.hour = h.hour
    GROUP BY ALL
),
levels AS (
    -- power-only thresholds per GPU and hour: idle floor = the GPU's 5th percentile of the day (≤ TDP/4);
    -- active level = median of the hour's slots clearly above idle (mostly decode, which outlasts
    -- prefill; the day's when the hour has < 1 min of them); hysteresis enters prefill at
    -- active + 50 % and leaves it below active + 30 % of the headroom to TDP.
    SELECT host, gpu, hour, idle_w, active_w,
           active_w + 0.5 * greatest(tdp_w - active_w, 0.25 * active_w) AS enter_w,
           active_w + 0.3 * greatest(tdp_w - active_w, 0.25 * active_w) AS leave_w,
           (idle_w + active_w) / 2 AS idle_max_w
    FROM (
        SELECT a.host, a.gpu, a.hour, a.tdp_w, a.idle_w,
               CASE WHEN a.n_active >= 600 THEN a.active_w ELSE coalesce(d.active_w, a.idle_w) END AS active_w
        FROM active AS a LEFT JOIN (
            SELECT host, gpu, median(power_w) AS active_w FROM busy GROUP BY ALL
        ) AS d USING (host, gpu)
    )
),
hyst AS (
    SELECT h.*, l.idle_max_w,
           max(CASE WHEN h.power_w >= l.enter_w THEN h.slot END) OVER w AS last_enter,
           max(CASE WHEN h.power_w < l.leave_w THEN h.slot END) OVER w AS last_leave
    FROM held AS h JOIN levels AS l ON l.host = h.host AND l.gpu = h.gpu AND l.hour = h.slot // 36000
    WINDOW w AS (PARTITION BY h.host, h.gpu ORDER BY h.slot ROWS UNBOUNDED PRECEDING)
)
SELECT
    getvariable('partition_date') AS date,
    h.endpoint,
    h.host,
    h.gpu,
    slot_ts(h.slot) AS ts,
    h.power_w::FLOAT AS power_w,
    h.power_w * 0.1 AS energy_j,
    s.n_prefill,
    s.n_decode,
    CASE
        WHEN NOT s.logged THEN NULL
        WHEN s.n_prefill > 0 THEN 'prefill'
        WHEN s.n_decode > 0 THEN 'decode'
        ELSE 'idle'
    END AS phase,
    s.prefill_estimated,
    s.prompt_tokens,
    s.output_tokens,
    CASE
        WHEN h.power_w IS NULL THEN NULL
        WHEN h.last_enter > coalesce(h.last_leave, -1) THEN 'prefill'
        WHEN h.power_w >= h.idle_max_w THEN 'decode'
        ELSE 'idle'
    END AS power_phase
FROM hyst AS h JOIN ep_state AS s USING (endpoint, slot)
ORDER BY h.endpoint, h.host, h.gpu, ts
