-- The energy of any interval of a GPU: E(b) − E(a), E(t) the trapezoid integral of the GPU's
-- best-source samples (view power_day) from its first sample of the day to t, the power linear
-- between consecutive samples, nothing across a gap > 2 s; 0 before the GPU's first sample of the
-- day, the day's total after its last. Exact for piecewise-linear power.
-- From energy_curve (one row per GPU-second: E and P at the second's start and end) and the raw
-- samples of t's own second: inside a second the power is linear between (start, P), the
-- second's samples and (end, P'). A second with no row has no power measured: E is the end
-- energy of the last row before it. Loaded after the derived-table views (energy_curve is always
-- defined, empty until built).
--   SELECT energy_between('h200-lab', 0, TIMESTAMPTZ '2026-12-03 10:00:41.8785', TIMESTAMPTZ '2026-12-03 10:00:41.9691');
-- Instants are TIMESTAMPTZ (µs); energy_at_ns takes ns since the epoch. a and b lie in one UTC day.

-- The trapezoid from x to min(t, nx) of the line through (x, p) and (nx, np), 0 where x >= t.
CREATE OR REPLACE MACRO segment_energy_to(x, p, nx, np, t) AS
    CASE WHEN nx > x AND x < t
         THEN (least(t, nx) - x) / 1e9 * (p + (p + (np - p) * (least(t, nx) - x) / (nx - x))) / 2
         ELSE 0.0 END;

-- The GPU's best-source samples (ns, W) in [b, b + 1 s) whose source has rank r (one per instant:
-- samples sharing a timestamp are their mean), read from the raw power files of that day.
CREATE OR REPLACE MACRO second_samples(h, g, b, r) AS TABLE
    SELECT epoch_ns(_ss.ts) AS x, avg(coalesce(_ss.power_w, _ss.power_avg_w)::DOUBLE) AS p
    FROM power AS _ss
    WHERE _ss.date = DATE '1970-01-01' + CAST(b // 86400000000000 AS INTEGER)
      AND _ss.host = h AND _ss.gpu = g
      AND _ss.ts >= make_timestamptz(b // 1000) AND _ss.ts < make_timestamptz(b // 1000 + 1000000)
      AND coalesce(_ss.power_w, _ss.power_avg_w) IS NOT NULL
      AND source_rank(_ss.source::VARCHAR, _ss.power_w IS NULL) = r
    GROUP BY ALL;

-- (inner names start with _ea_: a macro's arguments are expanded inside it, and must not meet a
-- column of the same name there)
CREATE OR REPLACE MACRO energy_at_ns(h, g, t) AS coalesce((
    SELECT CASE WHEN t >= _ea_c.t_ns + 1000000000 THEN _ea_c.end_energy_j
                ELSE _ea_c.energy_j + (
                    SELECT coalesce(sum(segment_energy_to(_ea_x, _ea_p, _ea_nx, _ea_np, t)), 0.0)
                    FROM (SELECT _ea_x, _ea_p, lead(_ea_x) OVER (ORDER BY _ea_x) AS _ea_nx, lead(_ea_p) OVER (ORDER BY _ea_x) AS _ea_np
                          FROM (SELECT _ea_c.t_ns AS _ea_x, _ea_c.power_w AS _ea_p WHERE _ea_c.power_w IS NOT NULL
                                UNION ALL
                                SELECT x, p FROM second_samples(h, g, _ea_c.t_ns, _ea_c.source_rank) WHERE _ea_c.samples > 0
                                UNION ALL
                                SELECT _ea_c.t_ns + 1000000000, _ea_c.end_power_w WHERE _ea_c.end_power_w IS NOT NULL)))
           END
    FROM energy_curve AS _ea_c
    WHERE _ea_c.host = h AND _ea_c.gpu = g AND _ea_c.t_ns <= t AND _ea_c.t_ns >= t - t % 86400000000000  -- the curve restarts each UTC day
    ORDER BY _ea_c.t_ns DESC LIMIT 1
), 0.0);

CREATE OR REPLACE MACRO energy_between(h, g, a, b) AS
    energy_at_ns(h, g, epoch_ns(b::TIMESTAMPTZ)) - energy_at_ns(h, g, epoch_ns(a::TIMESTAMPTZ));

-- E at many instants of the partition day at once: ``instants`` names a relation (host, gpu, t:
-- ns); returns (host, gpu, t, e_j), the same values as energy_at_ns. Each instant's second is
-- rebuilt once from its raw samples (a partial curve: its points with the cumulative energy at
-- each), then one ASOF join finds the point at or before each instant.
CREATE OR REPLACE MACRO energy_at_instants(instants) AS TABLE
WITH asked AS (
    SELECT DISTINCT host, gpu, t FROM query_table(instants)
),
rows AS (  -- the curve row of t's second, or the last before it (flat: t >= its end)
    SELECT p.host, p.gpu, p.t, c.t_ns AS b, c.energy_j, c.end_energy_j, c.power_w, c.end_power_w,
           c.first_t_ns, c.samples, c.source_rank
    FROM asked AS p
    ASOF LEFT JOIN (SELECT * FROM energy_curve WHERE date = getvariable('partition_date')) AS c
        ON p.host = c.host AND p.gpu = c.gpu AND p.t >= c.t_ns
),
inside AS (
    SELECT DISTINCT host, gpu, b, energy_j, power_w, end_power_w, first_t_ns, samples, source_rank
    FROM rows WHERE t < b + 1000000000
),
pts AS (  -- (start, P) unless a sample lies on it, the samples, (end, P')
    SELECT host, gpu, b, b AS x, power_w AS p FROM inside
    WHERE power_w IS NOT NULL AND (first_t_ns IS NULL OR first_t_ns > b)
    UNION ALL
    SELECT i.host, i.gpu, i.b, s.t_ns, avg(s.power_w::DOUBLE)
    FROM inside AS i
    JOIN power_day_samples AS s
        ON s.host = i.host AND s.gpu = i.gpu AND s.t_ns // 1000000000 * 1000000000 = i.b AND s.source_rank = i.source_rank  -- equi-join on the second
    WHERE i.samples > 0
    GROUP BY ALL
    UNION ALL
    SELECT host, gpu, b, b + 1000000000, end_power_w FROM inside WHERE end_power_w IS NOT NULL
),
seg AS (
    SELECT *, lead(x) OVER w AS nx, lead(p) OVER w AS np
    FROM pts WINDOW w AS (PARTITION BY host, gpu, b ORDER BY x)
),
cum AS (
    SELECT s.host, s.gpu, s.b, s.x, s.p, s.nx, s.np,
           i.energy_j + coalesce(sum(segment_energy_to(s.x, s.p, s.nx, s.np, s.nx))
               OVER (PARTITION BY s.host, s.gpu, s.b ORDER BY s.x ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS e
    FROM seg AS s JOIN inside AS i USING (host, gpu, b)
)
SELECT r.host, r.gpu, r.t,
       CASE WHEN r.b IS NULL THEN 0.0
            WHEN r.t >= r.b + 1000000000 THEN r.end_energy_j
            ELSE coalesce(q.e + segment_energy_to(q.x, q.p, q.nx, q.np, r.t), r.energy_j) END AS e_j
FROM rows AS r
ASOF LEFT JOIN cum AS q ON q.host = r.host AND q.gpu = r.gpu AND q.b = r.b AND r.t >= q.x;
