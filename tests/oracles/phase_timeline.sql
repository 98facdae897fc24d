-- phase_timeline: per endpoint GPU (while the endpoint held it: held_gpus) and 100 ms slot of the partition day.
--   power_w / energy_j : the slot's mean power (power_100ms); a slot without samples between two
--                        slots ≤ 1 s apart is linearly interpolated (250 ms and 1 s sources),
--                        longer gaps have no rows.
--   n_prefill, n_decode: the most requests of the endpoint in prefill / decode at once during the slot
--                        (the highest of the exact intervals of phase_intervals that touch it).
--   phase              : the label of the exact timeline under the any-overlap rule: 'prefill' if a
--                        prefill interval of phase_intervals touches the slot, else 'decode' if a decode
--                        one does, else 'idle'; NULL when the endpoint has no request log that day.
--   prefill_estimated  : a request in prefill here had no prefill_start_ts (fallback used).
--   prompt_tokens, output_tokens: the endpoint's tokens processed in the slot: each interval's tokens
--                        in proportion to its overlap with the slot (phase_intervals' token rates).
--   power_phase        : the power-only label of the slot from phase_segments' 'power' runs (the native
--                        detector, see docs/phases.md): prefill if a prefill run overlaps the slot, else
--                        decode if a decode run does, else idle; NULL where the GPU's source cannot
--                        resolve prefills (1 s averages, samples > 50 ms apart).
-- Derived from the exact timeline (phase_intervals), not from a sweep of its own over the request
-- log: the slot label and tokens are those of the intervals that touch the slot. Bounded memory
-- (DuckDB's memory_limit, spilling): the endpoints' request state is built first, into a temp table
-- (one integer key per busy endpoint slot: the final join's build side), so the GPU slots (one row per
-- endpoint GPU and slot) stream from their window into the join and the final sort.
-- The oracle of phase_timeline (a Python table: pipeline/assets/inference_phases.py, timeline_rows,
-- one endpoint GPU at a time in numpy); tests/test_phases_timeline_kernel.py holds the table's rows to
-- this file's on a small fixture.

-- integer keys: windows, joins and the final sort run on (gk, slot), not strings; one gk per endpoint
-- GPU and time the endpoint held it this day (held_gpus: a slot is the endpoint's that held the GPU
-- at the slot's start)
CREATE OR REPLACE TEMP TABLE _phase_gpus AS
SELECT name AS endpoint, host, gpu, tdp_w, from_ns, to_ns,
       row_number() OVER (ORDER BY name, host, gpu, from_ns) AS gk,
       dense_rank() OVER (ORDER BY name) AS ek
FROM held_gpus('endpoint');

-- the endpoint's request state per slot, from its exact timeline (phase_intervals); the build side
-- of the final join: one integer key per endpoint slot that some busy interval touches (the others:
-- idle, no tokens, filled in by the final LEFT JOIN)
CREATE OR REPLACE TEMP TABLE _phase_ep_state (
    ekey BIGINT, n_prefill INTEGER, n_decode INTEGER, prefill_estimated BOOLEAN,
    prompt_tokens DOUBLE, output_tokens DOUBLE, ph INTEGER
);

-- filled a few endpoints at a time (endpoints are independent): memory stays that of a chunk, however
-- many endpoints a cluster has; the asset sets phase_chunks / phase_chunk (default: one).
-- Each busy interval [start_ns, end_ns) touches slots start_ns // 100 ms to (end_ns − 1) // 100 ms;
-- per slot: the label of the busiest interval touching it (prefill > decode > idle: the any-overlap
-- rule), the most requests in each phase at once, and the tokens of each interval in proportion to
-- its overlap with the slot (each request's tokens spread evenly over its phase interval).
INSERT INTO _phase_ep_state
WITH endpoints AS (
    SELECT DISTINCT endpoint, ek FROM _phase_gpus
    WHERE ek % coalesce(getvariable('phase_chunks'), 1) = coalesce(getvariable('phase_chunk'), 0)
),
iv AS (
    SELECT e.ek, i.start_ns, i.end_ns, CASE i.phase WHEN 'prefill' THEN 2 ELSE 1 END AS ph, i.n_prefill, i.n_decode,
           i.prefill_estimated, i.prompt_tokens_per_s, i.output_tokens_per_s,
           unnest(range(i.start_ns // 100000000, (i.end_ns - 1) // 100000000 + 1)) AS slot
    FROM phase_intervals AS i JOIN endpoints AS e USING (endpoint)
    WHERE i.date = getvariable('partition_date') AND i.phase <> 'idle'
)
SELECT ek * 1048576 + (slot - day_first_slot()) AS ekey,
       max(n_prefill) AS n_prefill,
       max(n_decode) AS n_decode,
       bool_or(prefill_estimated) AS prefill_estimated,
       xsum(prompt_tokens_per_s * (least(end_ns, (slot + 1) * 100000000) - greatest(start_ns, slot * 100000000)) / 1e9) AS prompt_tokens,
       xsum(output_tokens_per_s * (least(end_ns, (slot + 1) * 100000000) - greatest(start_ns, slot * 100000000)) / 1e9) AS output_tokens,
       max(ph) AS ph
FROM iv GROUP BY ek, slot;

-- logged endpoints: those with a timeline this day (the others get phase NULL)
CREATE OR REPLACE TEMP TABLE _phase_logged AS
SELECT DISTINCT g.ek FROM _phase_gpus AS g
WHERE g.endpoint IN (SELECT endpoint FROM phase_intervals WHERE date = getvariable('partition_date'));

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
    coalesce(s.n_prefill, 0) AS n_prefill,
    coalesce(s.n_decode, 0) AS n_decode,
    CASE
        WHEN l.ek IS NULL THEN NULL
        WHEN s.ph = 2 THEN 'prefill'
        WHEN s.ph = 1 THEN 'decode'
        ELSE 'idle'
    END AS phase,
    coalesce(s.prefill_estimated, false) AS prefill_estimated,
    coalesce(s.prompt_tokens, 0) AS prompt_tokens,
    coalesce(s.output_tokens, 0) AS output_tokens,
    CASE ps.ph WHEN 2 THEN 'prefill' WHEN 1 THEN 'decode' WHEN 0 THEN 'idle' END AS power_phase
FROM (SELECT *, ek * 1048576 + (slot - day_first_slot()) AS ekey FROM gpu_slots) AS g
LEFT JOIN _phase_ep_state AS s USING (ekey)
LEFT JOIN _phase_logged AS l ON l.ek = g.ek
JOIN _phase_gpus AS k USING (gk)
LEFT JOIN _phase_power_slots AS ps ON ps.pkey = g.gk * 1048576 * 1048576 + g.slot
WHERE g.slot * 100000000 >= k.from_ns AND g.slot * 100000000 < k.to_ns
ORDER BY g.gk, g.slot
