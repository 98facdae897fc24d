"""Opening a data dir's Dagster instance again reads Dagster's migration scripts once per
process, not once per storage file."""

import os

from alembic.script import ScriptDirectory
from dagster import DagsterInstance

from pipeline import dagster_storage
from pipeline.runner import dagster_home


def test_the_newest_schema_revision_is_read_once_per_process(tmp_path, monkeypatch):
    monkeypatch.setitem(os.environ, "DAGSTER_HOME", str(dagster_home(tmp_path / "data")))
    with DagsterInstance.get():  # a new instance: its files are made and stamped
        pass
    reads: list[str] = []
    from_config = ScriptDirectory.from_config.__func__

    def counted(cls, config):
        reads.append(config.get_main_option("script_location"))
        return from_config(cls, config)

    monkeypatch.setattr(ScriptDirectory, "from_config", classmethod(counted))
    cached = getattr(dagster_storage, "_head_revision", None)
    if cached is not None:
        cached.cache_clear()  # as a fresh process has it
    for _ in range(2):
        with DagsterInstance.get() as instance:  # runs, event log index and schedules: a revision check each
            assert instance.get_runs() == []
            (db_revision, head), = {instance.event_log_storage.alembic_version(), instance.run_storage.alembic_version()}
            assert db_revision == head is not None  # the files are at the newest revision
    assert len(reads) == 1, reads
