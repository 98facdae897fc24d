"""Dagster's SQLite storage (runs, event log, schedules), the same files and schema, opened cheaply.

Dagster's own SQLite storage builds a new SQLAlchemy engine for every connection: each event of a
run (a step's start, a materialization, a check result) opened 5 to 10 of them, and each new
engine also repeats SQLAlchemy's first-connect set-up; a run of the tiny simulated day opened
~2,900. It also asks SQLite again, per event, whether tables and data migrations that never go
away exist. Here each database file gets one engine for the life of the process, still without a
pool (every use opens its own SQLite connection and closes it, as before, so locking between
processes is unchanged), and a table or completed migration once found is remembered.

Dagster's files are in SQLite's WAL mode. There, the last connection to close a file checkpoints
the WAL into it and deletes it, and the next one opens a new one: with a connection per use, that
was every use, ~2,700 a tiny run. So each file written also has one idle connection kept open
(:class:`_Keeper`: it holds no lock and no transaction, and goes when its run ends, when the
storage is wiped or disposed), and connections commit with ``synchronous=NORMAL``: in WAL mode a
commit then waits for no fsync (the WAL is synced at each checkpoint); what a power cut can lose is
a run's last events, never the file's consistency. 1.3 → 0.2 ms of CPU per connection use.

The files are Dagster's (``<DAGSTER_HOME>/history/runs.db``, ``history/runs/<run>.db`` and
``index.db``, ``schedules/schedules.db``): a data dir's earlier runs stay readable, and Dagster's
stock ``storage: sqlite:`` reads what this writes. dagster.yaml names this class.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage import sql
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite import sqlite_run_storage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool


@functools.cache
def _head_revision(script_location: str | None) -> str | None:
    """The newest schema revision among the migration scripts at ``script_location`` (Dagster's,
    installed with it: they do not change while a process runs)."""
    config = Config()
    config.set_main_option("script_location", script_location or "")
    return ScriptDirectory.from_config(config).as_revision_number("head")  # type: ignore[return-value]


def check_alembic_revision(alembic_config: Config, conn: Connection) -> tuple[str | None, str | None]:
    """Dagster's ``check_alembic_revision`` (the database's schema revision and the newest the
    scripts know) with the newest read once per process: Dagster parsed its ~100 migration
    scripts each time a storage or a run's event-log file was opened, ~11 times a ``wattline run``
    (~0.4 s CPU a run, ~1.7 s under cProfile)."""
    with sql._alembic_lock:
        db_revision = MigrationContext.configure(conn).get_current_revision()
    return db_revision, _head_revision(alembic_config.get_main_option("script_location"))


for _module in (sqlite_event_log, sqlite_run_storage, sqlite_schedule_storage):
    _module.check_alembic_revision = check_alembic_revision  # type: ignore[attr-defined]


KEPT_ENGINES = 64
"""Engines kept per event log (the index and the most recent runs' files); an engine without a
pool holds no connection, so one dropped costs only its rebuilding."""


KEPT_RUN_FILES = 4
"""Run files a process keeps a connection on at most (the newest written)."""

RUN_END_EVENTS = frozenset({DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED})
"""After these, a run's own file is only read: its kept connection is closed."""


def _commit_without_fsync(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def _sqlite_engine(conn_string: str, **connect_args) -> Engine:
    """A SQLite file's engine without a pool (each use opens its own connection, as Dagster's
    storage does), its connections committing with ``synchronous=NORMAL`` (module docstring)."""
    engine = create_engine(conn_string, poolclass=NullPool, connect_args=connect_args)
    event.listen(engine, "connect", _commit_without_fsync)
    return engine


class _Keeper:
    """One idle SQLite connection kept open on a file, so that the connections of its uses are
    never the last to close (module docstring). It read the file once (which maps the WAL index)
    and holds no transaction, so it blocks no writer and no checkpoint of any process."""

    def __init__(self, engine: Engine) -> None:
        self._connection: sqlite3.Connection | None = None
        path = engine.url.database
        if path and path != ":memory:":
            connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
            try:
                connection.execute("SELECT count(*) FROM sqlite_master").fetchall()
            except sqlite3.Error:
                connection.close()
                return
            self._connection = connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class _OneEngine:
    """A SQLite file's engine, made on first use (no pool: each use opens its own connection),
    and its :class:`_Keeper` once a use has set the file up."""

    def __init__(self, conn_string: str, keep: bool = True, **connect_args) -> None:
        self._conn_string = conn_string
        self._connect_args = connect_args
        self._engine: Engine | None = None
        self._keeper: _Keeper | None = None
        self._keep = keep
        self._lock = threading.Lock()

    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = _sqlite_engine(self._conn_string, **self._connect_args)
            return self._engine

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        with self.engine().connect() as conn, conn.begin():
            yield conn
        if self._keep and self._keeper is None:
            engine = self.engine()
            with self._lock:
                if self._keeper is None:
                    self._keeper = _Keeper(engine)

    def close(self) -> None:
        with self._lock:
            if self._keeper is not None:
                self._keeper.close()
                self._keeper = None


class EventLogStorage(SqliteEventLogStorage):
    """Dagster's run-sharded SQLite event log with one engine per shard file."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # before Dagster's set-up, which connects
        self._keepers: dict[str, _Keeper] = {}
        """Kept connections of the files being written: the index and the runs in progress here."""
        self._tables: set[str] = set()
        self._indexes: set[str] = set()
        super().__init__(base_dir, inst_data)
        # has_table is asked while an index connection is open (under _db_lock), so it has its own engine
        self._index = _OneEngine(self.conn_string_for_shard(INDEX_SHARD_NAME), timeout=SQLITE_BUSY_TIMEOUT_SECONDS)

    def _engine(self, shard: str) -> Engine:
        """The shard's engine (the caller holds ``_db_lock``); creates the shard's tables the first
        time this process meets it, as Dagster's storage does."""
        engine = self._engines.get(shard)
        if engine is None:
            engine = _sqlite_engine(self.conn_string_for_shard(shard), timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            self._engines[shard] = engine
            while len(self._engines) > KEPT_ENGINES:
                dropped, _ = self._engines.popitem(last=False)
                self._close_keeper(dropped)
        else:
            self._engines.move_to_end(shard)
        return engine

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            if shard not in self._initialized_dbs:  # upgrade() forgets them: make them again
                self._engines.pop(shard, None)
                self._close_keeper(shard)
            engine = self._engine(shard)
            with engine.connect() as conn, conn.begin():
                yield conn
            if shard == INDEX_SHARD_NAME and shard not in self._keepers:
                self._keepers[shard] = _Keeper(engine)

    def _close_keeper(self, shard: str) -> None:
        keeper = self._keepers.pop(shard, None)
        if keeper is not None:
            keeper.close()

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's, with the run's own file kept open while the run writes it (module docstring)."""
        run_id = event.run_id
        if run_id and run_id not in self._keepers:
            with self._db_lock:
                if run_id not in self._initialized_dbs:
                    self._engines.pop(run_id, None)
                engine = self._engine(run_id)  # sets the file up, if this is the run's first event
                if run_id not in self._keepers:
                    self._keepers[run_id] = _Keeper(engine)
                    runs = [shard for shard in self._keepers if shard != INDEX_SHARD_NAME]
                    for shard in runs[:-KEPT_RUN_FILES]:  # a run whose end another process wrote (the UI queues runs)
                        self._close_keeper(shard)
        super().store_event(event)
        if run_id and event.dagster_event_type in RUN_END_EVENTS:
            with self._db_lock:
                self._close_keeper(run_id)

    def delete_events(self, run_id: str) -> None:
        with self._db_lock:
            self._close_keeper(run_id)
        super().delete_events(run_id)

    def wipe(self) -> None:
        with self._db_lock:
            for shard in [s for s in self._keepers if s != INDEX_SHARD_NAME]:
                self._close_keeper(shard)
        super().wipe()

    def dispose(self) -> None:
        with self._db_lock:
            for shard in list(self._keepers):
                self._close_keeper(shard)
        super().dispose()

    def has_table(self, table_name: str) -> bool:
        """Whether the index shard has the table; asked per asset and check event, and a table,
        once there, stays."""
        if table_name in self._tables:
            return True
        with self._index.engine().connect() as conn:
            found = bool(conn.dialect.has_table(conn, table_name))
        if found:
            self._tables.add(table_name)
        return found

    def has_secondary_index(self, name: str) -> bool:
        """Whether a data migration of the index is complete; asked per asset lookup, and a
        completed one stays complete (a wipe rebuilds the storage object)."""
        if name in self._indexes:
            return True
        found = super().has_secondary_index(name)
        if found:
            self._indexes.add(name)
        return found

    def upgrade(self) -> None:
        self._tables.clear()
        self._indexes.clear()
        super().upgrade()


class _OneEngineFile:
    """A storage of one SQLite file (Dagster's run or schedule storage, mixed in before it) whose
    connections all come from one engine."""

    KEEP = True
    """Whether the file gets a :class:`_Keeper` (closed by ``dispose``, which Dagster's instance
    calls on its run storage and event log, not on its schedule storage)."""

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(conn_string, inst_data)  # type: ignore[call-arg]
        self._one = _OneEngine(conn_string, keep=self.KEEP)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._one.connect() as conn:
            yield conn

    def dispose(self) -> None:
        self._one.close()
        super().dispose()  # type: ignore[misc]


class RunStorage(_OneEngineFile, SqliteRunStorage):
    """Dagster's SQLite run storage with one engine for ``runs.db``."""


class ScheduleStorage(_OneEngineFile, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage with one engine for ``schedules.db`` (read as a run starts,
    written by the daemon's ticks: no kept connection)."""

    KEEP = False


class SqliteStorage(DagsterSqliteStorage):
    """``storage: custom:`` in dagster.yaml: Dagster's SQLite storage under ``base_dir``, its
    three parts the classes above."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self.base_dir = base_dir
        self._run_storage = RunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = EventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = ScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value) -> SqliteStorage:  # type: ignore[override]
        return cls.from_local(inst_data=inst_data, **config_value)
