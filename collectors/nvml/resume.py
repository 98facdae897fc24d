"""Start-up housekeeping for one host's folders: temp files of a killed writer, interrupted merges,
and where the driver buffer trace left off, so a restarted collector writes no duplicate samples."""

from __future__ import annotations

import logging
import time
from pathlib import Path, PurePosixPath

import pyarrow.compute as pc

from collectors.atomic import remove_stale_tmp
from collectors.contract import DATASETS, epoch_ns
from collectors.nvml.compact import roll_forward_in
from collectors.nvml.flusher import FILE_PREFIX
from collectors.nvml.rows import BUFFER
from collectors.storage import DataRoot

log = logging.getLogger("wattline.collect")


def _recent_days(now_unix_s: float | None = None) -> list[str]:
    now = time.time() if now_unix_s is None else now_unix_s
    return sorted({time.strftime("%Y-%m-%d", time.gmtime(now - d)) for d in (0, 86400)})


def recent_host_dirs(data_dir: Path, host: str, now_unix_s: float | None = None) -> list[Path]:
    """Today's and yesterday's (UTC) partition folders of this host that exist."""
    dirs = [DATASETS["power"].partition_dir(data_dir, day, host) for day in _recent_days(now_unix_s)]
    return [d for d in dirs if d.is_dir()]


def prepare(data_dir: Path | str | DataRoot, host: str) -> dict[int, int]:
    """Clean up after a crash and return {gpu: newest nvml-buffer driver timestamp µs already stored}.

    ``data_dir`` is local or ``s3://``; S3 has no temporary files to remove (an upload cut short
    is never visible)."""
    root = DataRoot.open(data_dir)
    if root.is_local:
        base = Path(root.location(""))
        folders = [d.relative_to(base).as_posix() for d in recent_host_dirs(base, host)]
    else:
        folders = [DATASETS["power"].partition_key(day, host) for day in _recent_days()]
    last_us: dict[int, int] = {}
    for folder in folders:
        if root.is_local:
            removed = remove_stale_tmp(root.location(folder))
            if removed:
                log.warning("%s: removed %d temporary file(s) of an interrupted write", root.location(folder), removed)
        roll_forward_in(root, folder)
        # the newest small flush files hold the latest samples; merged hours are read only if nothing else is left
        files = [st.key for st in sorted(root.list_stats(f"{folder}/{FILE_PREFIX}*.parquet"), key=lambda st: st.mtime_ns)]
        newest = [k for k in files if "-compacted-" not in PurePosixPath(k).name][-3:] or files[-1:]
        for key in newest:
            try:
                t = root.read_parquet(key, columns=["gpu", "ts", "source"])
            except Exception as exc:  # a foreign or damaged file must not stop the collector
                log.warning("%s: unreadable (%s); ignored for resume", root.location(key), exc)
                continue
            t = t.filter(pc.equal(t.column("source").cast("string"), BUFFER))
            if not t.num_rows:
                continue
            agg = t.group_by("gpu").aggregate([("ts", "max")])
            for g, ts in zip(agg.column("gpu").to_pylist(), epoch_ns(agg.column("ts_max")).to_pylist(), strict=False):
                last_us[g] = max(last_us.get(g, 0), ts // 1000)
    return last_us
