"""Start-up housekeeping for one host's folders: temp files of a killed writer, interrupted merges,
and where the driver buffer trace left off, so a restarted collector writes no duplicate samples."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from collectors.contract import DATASETS
from collectors.nvml.compact import roll_forward
from collectors.nvml.flusher import FILE_PREFIX
from collectors.nvml.rows import BUFFER
from collectors.parquet_sink import remove_stale_tmp

log = logging.getLogger("wattline.collect")


def recent_host_dirs(data_dir: Path, host: str, now_unix_s: float | None = None) -> list[Path]:
    """Today's and yesterday's (UTC) partition folders of this host that exist."""
    now = time.time() if now_unix_s is None else now_unix_s
    days = sorted({time.strftime("%Y-%m-%d", time.gmtime(now - d)) for d in (0, 86400)})
    dirs = [DATASETS["power"].partition_dir(data_dir, day, host) for day in days]
    return [d for d in dirs if d.is_dir()]


def prepare(data_dir: Path, host: str) -> dict[int, int]:
    """Clean up after a crash and return {gpu: newest nvml-buffer driver timestamp µs already on disk}."""
    last_us: dict[int, int] = {}
    for folder in recent_host_dirs(data_dir, host):
        removed = remove_stale_tmp(folder)
        if removed:
            log.warning("%s: removed %d temporary file(s) of an interrupted write", folder, removed)
        roll_forward(folder)
        # the newest small flush files hold the latest samples; merged hours are read only if nothing else is left
        files = sorted(folder.glob(f"{FILE_PREFIX}*.parquet"), key=lambda p: p.stat().st_mtime)
        newest = [p for p in files if "-compacted-" not in p.name][-3:] or files[-1:]
        for path in newest:
            try:
                t = pq.read_table(path, columns=["gpu", "ts", "source"])
            except Exception as exc:  # a foreign or damaged file must not stop the collector
                log.warning("%s: unreadable (%s); ignored for resume", path, exc)
                continue
            t = t.filter(pc.equal(t.column("source").cast("string"), BUFFER))
            if not t.num_rows:
                continue
            agg = t.group_by("gpu").aggregate([("ts", "max")])
            for g, ts in zip(agg.column("gpu").to_pylist(), agg.column("ts_max").cast("int64").to_pylist()):
                last_us[g] = max(last_us.get(g, 0), ts // 1000)
    return last_us
