-- The energy of any interval of a GPU, from energy_curve (sql/energy_curve/energy_curve.sql): E(b) − E(a), with
-- E(t) = the cumulative energy at the last sample at or before t plus the trapezoid from that
-- sample to t, the power linear between it and the next sample (nothing across a gap > 2 s; 0
-- before the GPU's first sample of the day, the day's total after its last). Exact for
-- piecewise-linear power, one index lookup per instant. Loaded after the derived-table views
-- (energy_curve is always defined, empty until built).
--   SELECT energy_between('h200-lab', 0, TIMESTAMPTZ '2026-12-03 10:00:41.8785', TIMESTAMPTZ '2026-12-03 10:00:41.9691');
-- Instants are TIMESTAMPTZ (µs); energy_at_ns takes ns since the epoch. a and b lie in one UTC day.

-- E(t) of one curve row (t_ns, power_w, energy_j, next_t_ns, next_w) at t (ns) inside its interval
CREATE OR REPLACE MACRO curve_energy_at(t_ns, power_w, energy_j, next_t_ns, next_w, t) AS
    CASE WHEN next_t_ns IS NULL OR t <= t_ns THEN energy_j
         ELSE energy_j + (least(t, next_t_ns) - t_ns) / 1e9
              * (power_w::DOUBLE + (power_w::DOUBLE + (next_w::DOUBLE - power_w::DOUBLE) * (least(t, next_t_ns) - t_ns) / (next_t_ns - t_ns))) / 2
    END;

CREATE OR REPLACE MACRO energy_at_ns(h, g, t) AS coalesce((
    SELECT curve_energy_at(c.t_ns, c.power_w, c.energy_j, c.next_t_ns, c.next_w, t)
    FROM energy_curve AS c
    WHERE c.host = h AND c.gpu = g AND c.t_ns <= t AND c.t_ns >= t - t % 86400000000000  -- the curve restarts each UTC day
    ORDER BY c.t_ns DESC LIMIT 1
), 0.0);

CREATE OR REPLACE MACRO energy_between(h, g, a, b) AS
    energy_at_ns(h, g, epoch_ns(b::TIMESTAMPTZ)) - energy_at_ns(h, g, epoch_ns(a::TIMESTAMPTZ));
