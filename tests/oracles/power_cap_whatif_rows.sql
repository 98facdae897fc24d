-- power_cap_whatif's per-(level, entity, phase, cap) rows, the test oracle: the statement that built
-- _cap_rows before it summed each second once whatever the cap and read per cap only the seconds
-- above it (sql/power_cap_whatif/power_cap_whatif.sql). Here every GPU-second is taken once per
-- (level, entity, phase) it counts in and per cap, each sum over all of them. It reads the temp
-- tables and macros the table's file makes before its _cap_rows (_cap_weighted, _cap_factors,
-- _cap_alpha, _cap_median) and replaces _cap_rows; tests/test_power_cap_whatif.py holds the file's
-- rows equal to these, to the last digit.
CREATE OR REPLACE TEMP TABLE _cap_rows AS
WITH per_second AS (
    SELECT x.level, x.entity, x.phase, x.host, x.gpu, x.gpu_model, x.limit_w, x.limit_source, f.cap_factor, x.weight, x.e, x.w,
           f.cap_factor * x.limit_w AS cap_w,
           x.w > f.cap_factor * x.limit_w AS above,
           f.cap_factor < 1 AND x.w > f.cap_factor * x.limit_w AS stretched,
           x.w / (f.cap_factor * x.limit_w) AS ratio,
           a.alpha, a.alpha_low, a.alpha_high, a.alpha_source
    FROM _cap_weighted AS x
    CROSS JOIN _cap_factors AS f
    JOIN _cap_alpha AS a USING (gpu_model)
)
SELECT level, entity, phase, cap_factor,
       CASE WHEN count(DISTINCT gpu_model) = 1 THEN any_value(gpu_model) ELSE 'mixed' END AS gpu_model,
       count(DISTINCT (host, gpu))::INTEGER AS gpus,
       _cap_median(histogram(limit_w), 1.0) AS enforced_limit_w,
       string_agg(DISTINCT limit_source, '; ' ORDER BY limit_source) AS limit_source,
       _cap_median(histogram(limit_w), cap_factor) AS cap_w,
       xsum(weight) AS gpu_seconds,
       xsum(weight * e) AS energy_j,
       xsum(weight * above::INT) / nullif(xsum(weight), 0) AS time_above_share,
       xsum(CASE WHEN above THEN weight * e ELSE 0 END) / nullif(xsum(weight * e), 0) AS energy_above_share,
       xsum(weight * greatest(w - cap_w, 0)) AS energy_above_cap_j,
       CASE WHEN count(DISTINCT alpha) = 1 THEN any_value(alpha) END AS alpha,
       min(alpha_low) AS alpha_low,
       max(alpha_high) AS alpha_high,
       string_agg(DISTINCT alpha_source, '; ' ORDER BY alpha_source) AS alpha_source,
       xsum(weight * CASE WHEN stretched THEN cap_w * pow(ratio, alpha) ELSE e END) AS est_energy_j,
       xsum(weight * CASE WHEN stretched THEN cap_w * pow(ratio, alpha_low) ELSE e END) AS est_energy_low_j,
       xsum(weight * CASE WHEN stretched THEN cap_w * pow(ratio, alpha_high) ELSE e END) AS est_energy_high_j,
       xsum(weight * CASE WHEN stretched THEN pow(ratio, alpha) ELSE 1 END) AS est_gpu_seconds,
       xsum(weight * CASE WHEN stretched THEN pow(ratio, alpha_low) ELSE 1 END) AS est_gpu_seconds_low,
       xsum(weight * CASE WHEN stretched THEN pow(ratio, alpha_high) ELSE 1 END) AS est_gpu_seconds_high
FROM per_second
GROUP BY level, entity, phase, cap_factor;
