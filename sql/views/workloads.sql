-- Which endpoint or job held each GPU during the partition day, and when: gpu_assignments (the
-- inventory's lists and timed assignments, job_events, the assignments dataset) clipped to the
-- day's [00:00, 24:00), with the GPU's inventory facts. Every per-endpoint and per-job table takes
-- a GPU's membership from here and joins its samples on time, never on the static inventory lists,
-- so a GPU that changes hands at noon counts for each workload only while it held it:
--   FROM power_1s AS p JOIN held_gpus('endpoint') AS h
--     ON h.host = p.host AND h.gpu = p.gpu AND epoch_ns(p.ts) >= h.from_ns AND epoch_ns(p.ts) < h.to_ns
-- (a slot or second belongs to whoever held the GPU at its start). A query that must see a holding
-- past the day's ends (a request still running at midnight: request_energy; the clock-offset
-- search into the adjacent days: requests_meet_power; job events crossing midnight:
-- training_energy) reads gpu_assignments itself, on the same from_ns / to_ns.
CREATE OR REPLACE MACRO held_gpus(k) AS TABLE
SELECT a.name, a.host, a.gpu,
       greatest(a.from_ns, epoch_ns(day_start())) AS from_ns,
       least(a.to_ns, epoch_ns(day_end())) AS to_ns,
       i.fleet, i.cluster, i.role, i.tdp_w, i.gpu_model, i.power_limit_w
FROM gpu_assignments AS a JOIN inventory_gpus AS i USING (host, gpu)
WHERE a.kind = k AND a.from_ns < epoch_ns(day_end()) AND a.to_ns > epoch_ns(day_start());

-- How many GPUs workload n (of kind k) held at instant t_ns: the GPUs a complete second of its
-- summed power needs.
CREATE OR REPLACE MACRO gpus_held_at(k, n, t_ns) AS (
    SELECT count(*) FROM held_gpus(k) AS h WHERE h.name = n AND h.from_ns <= t_ns AND h.to_ns > t_ns
);
