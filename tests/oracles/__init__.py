"""SQL oracles of the series tables (pipeline/series/): each file computes a table's rows in plain
SQL over the views of sql/views/ (power_day), as the DuckDB CLI would run it. Production computes
these tables only with the series engine; tests hold the engine's rows to these files on small
fixtures."""

from pathlib import Path

from pipeline import sqlfiles

ORACLES = Path(__file__).parent


def oracle_query(con, name: str) -> str:
    """The oracle of series table ``name`` run as the DuckDB CLI would: its preparatory statements
    (temp tables) executed on ``con``, its final query returned."""
    *prepare, query = sqlfiles.split((ORACLES / f"{name}.sql").read_text().strip().rstrip(";"))
    for statement in prepare:
        con.execute(statement)
    return query
