-- request_energy: per request that arrived on the partition day, the energy charged to its prefill
-- and decode (J) and per token (J/token). Attribution rule (docs/phases.md): each 100 ms slot's
-- energy (all GPUs of the endpoint) goes to the phase of the slot's label, and within it to the
-- requests active in that phase in proportion to the tokens each processes in the slot. With u(s) =
-- slot energy / slot tokens (J per token, per phase), a request's share is its token rate times
-- the integral of u over its interval: interior slots through a running sum of u, the two partial
-- edge slots directly. Idle slots are not charged (see energy_per_token.idle_j). Requests that
-- arrived the day before and ran past midnight are charged their share of this day but listed in
-- their arrival day's partition only (with this day's share missing there: documented).
WITH ep AS (
    SELECT endpoint, slot_100ms(ts) AS slot, any_value(phase) AS phase, coalesce(xsum(energy_j), 0) AS energy_j,
           any_value(prompt_tokens) AS prompt_tokens, any_value(output_tokens) AS output_tokens
    FROM phase_timeline
    WHERE date = getvariable('partition_date') AND phase IN ('prefill', 'decode')
    GROUP BY ALL
),
price AS (
    SELECT endpoint, slot, u_pre, u_dec,
           sum(u_pre) OVER w AS cu_pre, sum(u_dec) OVER w AS cu_dec
    FROM (
        SELECT endpoint, slot,
               CASE WHEN phase = 'prefill' AND prompt_tokens > 0 THEN energy_j / prompt_tokens ELSE 0 END AS u_pre,
               CASE WHEN phase = 'decode' AND output_tokens > 0 THEN energy_j / output_tokens ELSE 0 END AS u_dec
        FROM ep
    )
    WINDOW w AS (PARTITION BY endpoint ORDER BY slot ROWS UNBOUNDED PRECEDING)
),
charged AS (
    SELECT iv.request_id, iv.endpoint, iv.phase,
           iv.rate * (
               CASE WHEN a.slot = iv.sa THEN u_a ELSE 0 END * (least(iv.b_ns, (iv.sa + 1) * 100000000) - iv.a_ns)
               + CASE WHEN iv.sb > iv.sa THEN
                     CASE WHEN b.slot = iv.sb THEN u_b ELSE 0 END * (iv.b_ns - iv.sb * 100000000)
                     + 100000000 * (coalesce(cu_b, 0) - CASE WHEN b.slot = iv.sb THEN u_b ELSE 0 END - coalesce(cu_a, 0))
                 ELSE 0 END
           ) AS energy_j
    FROM request_intervals AS iv
    ASOF LEFT JOIN (SELECT endpoint, slot, u_pre, u_dec, cu_pre, cu_dec FROM price) AS a
        ON iv.endpoint = a.endpoint AND iv.sa >= a.slot
    ASOF LEFT JOIN (SELECT endpoint, slot, u_pre, u_dec, cu_pre, cu_dec FROM price) AS b
        ON iv.endpoint = b.endpoint AND iv.sb >= b.slot
    CROSS JOIN LATERAL (SELECT
        CASE WHEN iv.phase = 'prefill' THEN a.u_pre ELSE a.u_dec END AS u_a,
        CASE WHEN iv.phase = 'prefill' THEN a.cu_pre ELSE a.cu_dec END AS cu_a,
        CASE WHEN iv.phase = 'prefill' THEN b.u_pre ELSE b.u_dec END AS u_b,
        CASE WHEN iv.phase = 'prefill' THEN b.cu_pre ELSE b.cu_dec END AS cu_b)
),
per_request AS (
    SELECT request_id, endpoint,
           coalesce(sum(energy_j) FILTER (WHERE phase = 'prefill'), 0) AS prefill_j,
           coalesce(sum(energy_j) FILTER (WHERE phase = 'decode'), 0) AS decode_j
    FROM charged GROUP BY ALL
)
SELECT
    getvariable('partition_date') AS date,
    r.request_id,
    r.endpoint,
    coalesce(c.prefill_j, 0) AS prefill_j,
    coalesce(c.decode_j, 0) AS decode_j,
    coalesce(c.prefill_j, 0) + coalesce(c.decode_j, 0) AS total_j,
    coalesce(c.prefill_j, 0) / nullif(r.prompt_tokens, 0) AS j_per_prompt_token,
    coalesce(c.decode_j, 0) / nullif(r.output_tokens, 0) AS j_per_output_token,
    r.prefill_start_estimated,
    r.prompt_tokens,
    r.output_tokens,
    r.arrival_ts,
    r.status
FROM request_phases AS r
LEFT JOIN per_request AS c USING (request_id, endpoint)
WHERE r.arrival_date = getvariable('partition_date')
   OR getvariable('request_energy_carryover')  -- set by the conservation check: also the day before's arrivals
ORDER BY r.endpoint, r.arrival_ts, r.request_id
