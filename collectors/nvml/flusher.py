"""Rows → atomic Parquet files, one per (day, hour) per flush; a full disk never crashes the collector.

The data dir may be local or ``s3://bucket/prefix`` (:mod:`collectors.storage`); on S3 each flush
is one object, visible only once uploaded whole, and a failed upload is handled like a full disk.

Files are named ``nvml-<YYYYMMDDTHH>-<run>-<seq>.parquet`` so compaction can merge one closed
hour without reading any other. When a write fails (disk full, read-only remount), the rows stay
in memory up to ``max_pending_rows``; past that the oldest are dropped and counted. Writing resumes
by itself at the next flush once space returns.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from collectors.contract import DATASETS, epoch_ns
from collectors.nvml.counters import Counters
from collectors.storage import DataRoot

log = logging.getLogger("wattline.collect")

HOUR_NS = 3_600_000_000_000
FILE_PREFIX = "nvml-"


def hour_key(hour_index: int) -> tuple[str, str]:
    """(YYYY-MM-DD, YYYYMMDDTHH) of an hour counted since the epoch (UTC)."""
    t = time.gmtime(hour_index * 3600)
    return time.strftime("%Y-%m-%d", t), time.strftime("%Y%m%dT%H", t)


def split_by_hour(table: pa.Table) -> list[tuple[int, pa.Table]]:
    """Split a table into (hour index, rows of that hour), in time order."""
    hours = pc.divide(epoch_ns(table.column("ts")), HOUR_NS)
    parts = []
    for h in sorted(set(pc.unique(hours).to_pylist())):
        parts.append((h, table.filter(pc.equal(hours, h))))
    return parts


class Flusher:
    def __init__(self, data_dir: Path | str | DataRoot, host: str, counters: Counters,
                 max_pending_rows: int = 1_000_000, write=None):
        self.root = DataRoot.open(data_dir)
        self.data_dir = self.root.location("")
        self.host = host
        self.counters = counters
        self.max_pending_rows = max_pending_rows
        self.run_id = uuid.uuid4().hex[:6]
        self.seq = 0
        self.pending: deque[tuple[int, pa.Table]] = deque()
        self.pending_rows = 0
        self.failing_since: float | None = None
        self._last_loud_log = 0.0
        # write(table, location): injectable so the disk-full tests need no real full disk;
        # None: the data root's atomic write
        self._write = write

    def key_for(self, hour: int) -> str:
        day, key = hour_key(hour)
        self.seq += 1
        folder = DATASETS["power"].partition_key(day, self.host)
        return f"{folder}/{FILE_PREFIX}{key}-{self.run_id}-{self.seq:06d}.parquet"

    def _visible(self, key: str) -> bool:
        try:
            return self.root.exists(key)
        except OSError:  # storage unreachable: certainly not written by us just now
            return False

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        for part in split_by_hour(table):
            self.pending.append(part)
            self.pending_rows += part[1].num_rows

    def _enforce_bound(self) -> None:
        """After a failed write only: rows waiting for their first write are never dropped, so a
        flush bigger than the bound is written whole while the disk is fine."""
        while self.pending_rows > self.max_pending_rows and self.pending:
            _, dropped = self.pending.popleft()
            self.pending_rows -= dropped.num_rows
            self.counters.add("rows_dropped", dropped.num_rows)
            log.error("disk still failing and %d rows pending: dropped the oldest %d rows (bound --max-pending-rows)",
                      self.pending_rows + dropped.num_rows, dropped.num_rows)

    def flush(self) -> bool:
        """Write every pending part; True when nothing is left pending."""
        while self.pending:
            hour, part = self.pending[0]
            key = self.key_for(hour)
            path = self.root.location(key)
            try:
                if self._write is None:
                    self.root.write_parquet(key, part)
                else:
                    self._write(part, path)
            except OSError as exc:
                if not self._visible(key):
                    self._failed(exc)
                    self._enforce_bound()
                    return False
                # renamed into place, then the folder's fsync failed: the rows are in a complete,
                # visible file; writing them again would duplicate them
                self.counters.add("dir_sync_errors")
                log.error("%s: written, but syncing its folder failed (%s); not written again", path, exc)
            self.pending.popleft()
            self.pending_rows -= part.num_rows
            self.counters.add("files_written")
            self.counters.add("rows_written", part.num_rows)
        if self.failing_since is not None:
            log.warning("writing resumed after %.1f s of failed writes; nothing pending", time.time() - self.failing_since)
            self.failing_since = None
        return True

    def _failed(self, exc: OSError) -> None:
        self.counters.add("write_errors")
        now = time.time()
        if self.failing_since is None:
            self.failing_since = now
        if now - self._last_loud_log >= 30 or self.failing_since == now:
            self._last_loud_log = now
            log.error("cannot write Parquet (%s): keeping %d rows in memory (bound %d), sampling continues",
                      exc, self.pending_rows, self.max_pending_rows)
