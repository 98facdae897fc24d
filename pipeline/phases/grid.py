"""The 100 ms power grid the phase tables read.

`power_100ms` is the power-analytics asset; until it is materialized for the day (or while it
is not in this checkout) the phase assets bucket the best-source trace (`power_day`) to 100 ms
themselves, in a temporary view of their own connection (no second grid asset).
"""

import duckdb

FALLBACK = """
CREATE OR REPLACE TEMP VIEW power_100ms AS
SELECT getvariable('partition_date') AS date, host, gpu, time_bucket(INTERVAL 100 MILLISECOND, ts) AS ts,
       avg(power_w)::FLOAT AS power_w, count(*)::INTEGER AS samples, any_value(source) AS source
FROM power_day GROUP BY ALL
"""


def ensure_power_grid(con: duckdb.DuckDBPyConnection) -> bool:
    """Create the fallback view when `power_100ms` has no rows for the day; True if it did."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'power_100ms'"
    ).fetchone()[0]
    if exists and con.execute(
        "SELECT count(*) > 0 FROM (SELECT 1 FROM power_100ms WHERE date = getvariable('partition_date') LIMIT 1)"
    ).fetchone()[0]:
        return False
    con.execute(FALLBACK)
    return True
