"""A compute connection's default memory bound: what DuckDB may fill in one step, on top of the
~0.4 GB the process holds between steps, sets a whole run's peak RSS (docs/benchmarks.md, "Peak
memory of a whole run")."""

from __future__ import annotations

from pipeline import warehouse


def _limit(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def test_default_bound_is_the_compute_cap_below_the_machine_default(monkeypatch, tmp_path):
    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 2048)
    assert warehouse.duckdb_config()["memory_limit"] == f"{warehouse.COMPUTE_MEMORY_MB}MB" == "512MB"
    with warehouse.compute_connection(tmp_path) as con:
        assert _limit(con) == "488.2 MiB"  # DuckDB's own rendering of 512 MB


def test_a_smaller_machine_keeps_its_smaller_default(monkeypatch):
    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 300)
    assert warehouse.duckdb_config()["memory_limit"] == "300MB"


def test_a_bound_the_run_was_given_is_kept(monkeypatch):
    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 2048)
    assert warehouse.duckdb_config("2GB")["memory_limit"] == "2GB"
