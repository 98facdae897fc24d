-- The 100 ms grid every power analytic works on: slot k of a trace covers [k × 100 ms, (k + 1) × 100 ms)
-- since the Unix epoch (UTC), so the slots of all GPUs line up and sum without interpolation.

CREATE OR REPLACE MACRO slot_100ms(ts) AS epoch_ns(ts) // 100000000;

CREATE OR REPLACE MACRO slot_ts(slot) AS make_timestamptz(slot * 100000);

CREATE OR REPLACE MACRO day_first_slot() AS slot_100ms(day_start());
