"""Durable read positions of followed log files.

A file is known by its identity, not its name: ``(st_dev, st_ino)`` plus a SHA-256 of its
first bytes (the *head fingerprint*), so a rename (log rotation) keeps the position and a new
file that happens to reuse a freed inode does not inherit it. The checkpoint is one JSON file
replaced atomically (temp, fsync, rename, fsync of the folder): a crash leaves the old or the
new version, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from collectors.atomic import fsync_dir

FINGERPRINT_BYTES = 256
VERSION = 1


@dataclass
class Position:
    dev: int
    ino: int
    fp: str  # sha256 hex of the first fp_len bytes
    fp_len: int
    offset: int  # first byte not yet durably ingested (always a line start)
    line: int  # its 1-based line number
    path: str  # last path the file was seen under

    @property
    def identity(self) -> tuple[int, int]:
        return (self.dev, self.ino)


def head_fingerprint(fd: int, size: int) -> tuple[str, int]:
    n = min(size, FINGERPRINT_BYTES)
    return hashlib.sha256(os.pread(fd, n, 0)).hexdigest(), n


def head_matches(fd: int, pos: Position) -> bool:
    """Does the open file still start with the bytes it was fingerprinted by?"""
    data = os.pread(fd, pos.fp_len, 0)
    return len(data) == pos.fp_len and hashlib.sha256(data).hexdigest() == pos.fp


def load(path: Path) -> list[Position]:
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {doc.get('version')!r}, expected {VERSION}")
    return [Position(**entry) for entry in doc["files"]]


def save(path: Path, positions: list[Position]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump({"version": VERSION, "files": [asdict(p) for p in positions]}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
