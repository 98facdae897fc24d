-- phase_timeline: per endpoint GPU (inventory) and 100 ms slot of the partition day.
--   power_w / energy_j : the slot's mean power (power_100ms); a slot without samples between two
--                        slots ≤ 1 s apart is linearly interpolated (250 ms and 1 s sources),
--                        longer gaps have no rows.
--   n_prefill, n_decode: requests of the endpoint in prefill / decode during the slot (any overlap).
--   phase              : 'prefill' if n_prefill > 0, else 'decode' if n_decode > 0, else 'idle',
--                        NULL when the endpoint has no request log that day.
--   prefill_estimated  : a request in prefill here had no prefill_start_ts (fallback used).
--   prompt_tokens, output_tokens: the endpoint's tokens processed in the slot (each request's
--                        tokens spread evenly over its phase interval).
--   power_phase        : the power-only label of the slot from phase_segments' 'power' runs (the native
--                        detector, see docs/phases.md): prefill if a prefill run overlaps the slot, else
--                        decode if a decode run does, else idle; NULL where the GPU's source cannot
--                        resolve prefills (1 s averages, samples > 50 ms apart).
-- Request state is a sweep over interval events (+/- at the first/last slot, token rates over the
-- interior, partial edge slots) summed over the endpoint grid in one window: linear in slots + requests.
-- Bounded memory (DuckDB's memory_limit, spilling): the endpoints' request state is built first,
-- into a temp table (one integer key per endpoint slot: the final join's build side), so the GPU
-- slots (one row per endpoint GPU and slot) stream from their window into the join and the final
-- sort and are never held whole; grid and events are unioned and summed, not full-outer-joined.

-- integer keys: windows, joins and the final sort run on (gk, slot), not strings
CREATE OR REPLACE TEMP TABLE _phase_gpus AS
SELECT endpoint, host, gpu, tdp_w,
       row_number() OVER (ORDER BY endpoint, host, gpu) AS gk,
       dense_rank() OVER (ORDER BY endpoint) AS ek
FROM inventory_gpus WHERE endpoint IS NOT NULL;

-- the endpoint's request state per slot; the build side of the final join: one integer key per endpoint slot
CREATE OR REPLACE TEMP TABLE _phase_ep_state (
    ekey BIGINT, n_prefill INTEGER, n_decode INTEGER, prefill_estimated BOOLEAN,
    prompt_tokens DOUBLE, output_tokens DOUBLE, logged BOOLEAN
);

-- filled a few endpoints at a time (endpoints are independent): memory stays that of a chunk, however
-- many endpoints and requests a cluster has; the asset sets phase_chunks / phase_chunk (default: one)
INSERT INTO _phase_ep_state
WITH endpoints AS (
    SELECT DISTINCT endpoint, ek FROM _phase_gpus
    WHERE ek % coalesce(getvariable('phase_chunks'), 1) = coalesce(getvariable('phase_chunk'), 0)
),
span AS (
    SELECT g.ek, min(slot_100ms(p.ts)) AS lo, max(slot_100ms(p.ts)) AS hi
    FROM power_100ms AS p JOIN _phase_gpus AS g USING (host, gpu)
    WHERE p.date = getvariable('partition_date') AND p.power_w IS NOT NULL AND g.ek IN (SELECT ek FROM endpoints)
    GROUP BY ALL
),
ep_grid AS (
    SELECT ek, unnest(range(lo, hi + 1)) AS slot FROM span
),
iv AS MATERIALIZED (  -- the day's request intervals, read once; only the numbers the sweep uses
    SELECT ek, phase = 'prefill' AS pre, sa, sb, a_ns, b_ns, rate, estimated
    FROM request_intervals JOIN endpoints USING (endpoint)
),
ev AS (
    SELECT ek, pre, sa AS slot, 1 AS dn, estimated::INT AS dest, 0.0 AS drate,
           rate * (least(b_ns, (sa + 1) * 100000000) - a_ns) AS edge
    FROM iv
    UNION ALL
    SELECT ek, pre, sb + 1, -1, -estimated::INT, 0.0, 0.0 FROM iv
    UNION ALL
    SELECT ek, pre, sb, 0, 0, 0.0, rate * (b_ns - sb * 100000000) FROM iv WHERE sb > sa
    UNION ALL
    SELECT ek, pre, sa + 1, 0, 0, rate * 100000000, 0.0 FROM iv WHERE sb > sa
    UNION ALL
    SELECT ek, pre, sb, 0, 0, -rate * 100000000, 0.0 FROM iv WHERE sb > sa
),
ev_slot AS (
    SELECT ek, slot,
           coalesce(sum(dn) FILTER (WHERE pre), 0) AS dn_pre,
           coalesce(sum(dn) FILTER (WHERE NOT pre), 0) AS dn_dec,
           coalesce(sum(dest), 0) AS dest,
           coalesce(xsum(CASE WHEN pre THEN drate END), 0) AS drate_pre,
           coalesce(xsum(CASE WHEN NOT pre THEN drate END), 0) AS drate_dec,
           coalesce(xsum(CASE WHEN pre THEN edge END), 0) AS edge_pre,
           coalesce(xsum(CASE WHEN NOT pre THEN edge END), 0) AS edge_dec
    FROM ev GROUP BY ek, slot
),
state AS (  -- running sums over the endpoint grid and the event slots together (no ASOF needed),
            -- the three counts travel packed in one integer sum (20 bits each)
    SELECT ek, slot, on_grid,
           sum((dn_pre + dn_dec * 1048576 + dest * 1099511627776)::BIGINT) OVER w AS packed,
           sum(drate_pre) OVER w + edge_pre AS prompt_tokens,
           sum(drate_dec) OVER w + edge_dec AS output_tokens
    FROM (  -- grid and event slots together: a union summed per slot (a full outer join would hold a
            -- hash table that cannot spill while the final join builds its own)
        SELECT ek, slot, bool_or(on_grid) AS on_grid,
               sum(dn_pre) AS dn_pre, sum(dn_dec) AS dn_dec, sum(dest) AS dest,
               sum(drate_pre) AS drate_pre, sum(drate_dec) AS drate_dec, sum(edge_pre) AS edge_pre, sum(edge_dec) AS edge_dec
        FROM (
            SELECT ek, slot, true AS on_grid, 0 AS dn_pre, 0 AS dn_dec, 0 AS dest,
                   0.0::DOUBLE AS drate_pre, 0.0::DOUBLE AS drate_dec, 0.0::DOUBLE AS edge_pre, 0.0::DOUBLE AS edge_dec
            FROM ep_grid
            UNION ALL
            SELECT ek, slot, false, dn_pre, dn_dec, dest, drate_pre, drate_dec, edge_pre, edge_dec FROM ev_slot
        )
        GROUP BY ek, slot
    )
    WINDOW w AS (PARTITION BY ek ORDER BY slot ROWS UNBOUNDED PRECEDING)
)
SELECT ek * 1048576 + (slot - day_first_slot()) AS ekey,
       (packed % 1048576)::INTEGER AS n_prefill,
       (packed // 1048576 % 1048576)::INTEGER AS n_decode,
       packed // 1099511627776 > 0 AS prefill_estimated,
       greatest(prompt_tokens, 0) AS prompt_tokens,
       greatest(output_tokens, 0) AS output_tokens,
       ek IN (SELECT ek FROM endpoints WHERE endpoint IN (SELECT endpoint FROM request_phases)) AS logged
FROM state WHERE on_grid;

-- the power-only label per GPU slot, from phase_segments' 'power' runs (the detector at native
-- resolution, pipeline/phases/power_detect.py): prefill if a prefill run overlaps the slot, else decode if
-- a decode run does, else idle (the rule of the request label); a run (lo, hi] overlaps slots
-- lo // 100 ms to (hi − 1) // 100 ms. No row (NULL label) where the source cannot resolve prefills.
CREATE OR REPLACE TEMP TABLE _phase_power_slots AS
SELECT g.gk * 1048576 * 1048576 + slot AS pkey, max(ph) AS ph
FROM (
    SELECT s.endpoint, s.host, s.gpu,
           CASE s.phase WHEN 'idle' THEN 0 WHEN 'decode' THEN 1 ELSE 2 END AS ph,
           unnest(range(epoch_us(s.start_ts) // 100000, (epoch_us(s.end_ts) - 1) // 100000 + 1)) AS slot
    FROM phase_segments AS s
    WHERE s.date = getvariable('partition_date') AND s.source = 'power'
) AS x
JOIN _phase_gpus AS g USING (endpoint, host, gpu)
GROUP BY ALL;

WITH pw AS (
    SELECT g.gk, g.ek, slot_100ms(p.ts) AS slot, p.power_w::DOUBLE AS power_w
    FROM power_100ms AS p JOIN _phase_gpus AS g USING (host, gpu)
    WHERE p.date = getvariable('partition_date') AND p.power_w IS NOT NULL
),
sampled AS (  -- one pass per GPU: the next sample, for gap interpolation
    SELECT gk, ek, slot, power_w,
           lead(slot) OVER w AS next_slot,
           lead(power_w) OVER w AS next_w
    FROM pw
    WINDOW w AS (PARTITION BY gk ORDER BY slot)
),
gpu_slots AS (  -- samples, plus slots linearly interpolated across gaps of at most 1 s (one pass over sampled)
    SELECT gk, ek, s AS slot,
           CASE WHEN s = slot THEN power_w ELSE power_w + (next_w - power_w) * (s - slot) / (next_slot - slot) END AS power_w
    FROM (SELECT *, unnest(CASE WHEN next_slot - slot BETWEEN 2 AND 10 THEN range(slot, next_slot) ELSE [slot] END) AS s FROM sampled)
)
SELECT
    getvariable('partition_date') AS date,
    k.endpoint,
    k.host,
    k.gpu,
    slot_ts(g.slot) AS ts,
    g.power_w::FLOAT AS power_w,
    g.power_w * 0.1 AS energy_j,
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
    CASE ps.ph WHEN 2 THEN 'prefill' WHEN 1 THEN 'decode' WHEN 0 THEN 'idle' END AS power_phase
FROM (SELECT *, ek * 1048576 + (slot - day_first_slot()) AS ekey FROM gpu_slots) AS g
JOIN _phase_ep_state AS s USING (ekey)
JOIN _phase_gpus AS k USING (gk)
LEFT JOIN _phase_power_slots AS ps ON ps.pkey = g.gk * 1048576 * 1048576 + g.slot
ORDER BY g.gk, g.slot
