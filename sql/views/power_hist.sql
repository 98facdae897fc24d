-- Quantiles from 1 W histograms: a day of 100 ms slots is tens of millions of values per level,
-- and an exact quantile would sort them all; counting them into 1 W bins is one cheap hash
-- aggregation, and the nearest-rank quantile of the binned values is exact to ±0.5 W.

-- hist_table: (key columns..., bin, n) with bin = round(power_w); returns key columns + quantile.
CREATE OR REPLACE MACRO hist_quantile(hist_table, q) AS TABLE
SELECT * EXCLUDE (bin, n, cum, total), bin AS value
FROM (
    SELECT
        *,
        sum(n) OVER (PARTITION BY level, entity ORDER BY bin ROWS UNBOUNDED PRECEDING) AS cum,
        sum(n) OVER (PARTITION BY level, entity) AS total
    FROM query_table(hist_table)
)
WHERE cum >= q * total
QUALIFY row_number() OVER (PARTITION BY level, entity ORDER BY bin) = 1;
