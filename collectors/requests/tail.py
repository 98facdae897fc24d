"""``--follow``: ingest request logs as they are written, like ``tail -F``, without loss or repeats.

What is followed: each named file (by name: when it is renamed away, the new file under that
name is picked up) and every matching file of each named directory (new ones included). Each
file is read through its own open handle, so a file renamed by log rotation is still read to
its end; it is closed once it is no longer under a followed name and has not grown for
``close_after_s``. A file whose size drops below the read position, or whose first bytes
change, was truncated or replaced (``copytruncate``): it is read again from its start.
Only complete lines are taken; a partial last line waits for its newline.

Write order, per flush (every ``flush_interval_s`` and on stop):

1. new request rows → ``requests/date=D/*.parquet`` (temp file, fsync, rename, fsync folder);
2. rejected lines → ``quarantine/requests/...`` (the same way);
3. only then the checkpoint (read positions) is replaced atomically.

A crash before 3 leaves the old positions: on restart those lines are read again, and the
store recognises them as identical duplicates (by ``request_id`` + ``endpoint`` and content) and
the quarantine by (file, line, bytes), so nothing is written twice. Advancing the checkpoint
first would instead lose the lines of a crash between the two writes. Lines are never lost:
a position only moves past lines that are already durable.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from collectors.requests import checkpoint
from collectors.requests.checkpoint import Position, head_fingerprint, head_matches
from collectors.requests.ingestor import PATTERNS, Ingestor
from collectors.requests.jsonl import parse_lines
from collectors.requests.lines import Line, LineReader
from collectors.requests.store import empty_frame
from collectors.storage import DataRoot

MAX_PENDING_LINES = 200_000
"""Flush early when this many lines wait (bounds memory under a burst)."""
READ_PER_POLL_BYTES = 64 << 20


def default_checkpoint(data_dir: Path | str | DataRoot, targets: list[Path]) -> Path:
    """One checkpoint per set of followed paths, a local file under the data dir's state folder:
    ``<data-dir>/state/``, or for an ``s3://`` data dir ``$WATTLINE_STATE_DIR`` (default
    ``~/.local/state/wattline/s3/<bucket>/<prefix>/``; see ``DataRoot.state_dir``)."""
    key = "\n".join(sorted(str(Path(t).resolve()) for t in targets))
    return DataRoot.open(data_dir).state_dir() / f"requests-follow-{hashlib.sha1(key.encode()).hexdigest()[:10]}.json"


@dataclass
class _Followed:
    """One open file: its identity, reader, and the lines read since the last flush."""

    pos: Position  # durable position (what the checkpoint says)
    fh: object
    reader: LineReader
    pending: list[Line] = field(default_factory=list)
    last_growth: float = field(default_factory=time.monotonic)
    finished: bool = False


class Follower:
    def __init__(
        self,
        targets: list[Path],
        ingestor: Ingestor,
        *,
        checkpoint_path: Path | None = None,
        flush_interval_s: float = 5.0,
        poll_interval_s: float = 0.25,
        close_after_s: float = 5.0,
        warn=lambda msg: print(f"warning: {msg}", file=sys.stderr),
    ) -> None:
        self.targets = [Path(os.path.abspath(t)) for t in targets]
        self.ingestor = ingestor
        self.checkpoint_path = checkpoint_path or default_checkpoint(ingestor.root, self.targets)
        self.flush_interval_s = flush_interval_s
        self.poll_interval_s = poll_interval_s
        self.close_after_s = close_after_s
        self.warn = warn
        self.files: dict[tuple[int, int], _Followed] = {}
        self._saved = {p.identity: p for p in checkpoint.load(self.checkpoint_path)}
        self._last_saved: list[Position] | None = None
        self.files_seen = 0
        self._resume_rotated()

    # ---- the loop

    def run(self, stop: threading.Event, max_s: float | None = None) -> None:
        """Poll and flush until ``stop`` is set (or ``max_s`` passed); always flushes on the way out."""
        started = last_flush = time.monotonic()
        try:
            while not stop.is_set() and (max_s is None or time.monotonic() - started < max_s):
                self.poll()
                now = time.monotonic()
                if now - last_flush >= self.flush_interval_s or self._pending() >= MAX_PENDING_LINES:
                    try:
                        self.flush()
                    except OSError as exc:  # e.g. disk full: keep the lines (reading pauses), retry
                        self.warn(f"flush failed, will retry: {exc}")
                    last_flush = now
                stop.wait(self.poll_interval_s)
        finally:
            self.flush()
            self.close()

    def poll(self) -> None:
        """Discover files, then read every complete line now available."""
        named = self._discover()
        for ident, f in list(self.files.items()):
            if f.finished or self._pending() >= MAX_PENDING_LINES:  # backpressure while flushes fail
                continue
            self._read(f)
            if ident not in named and time.monotonic() - f.last_growth >= self.close_after_s:
                self._finish(f)

    def flush(self) -> None:
        """Make everything read so far durable, then advance the checkpoint (see module doc)."""
        frames, rejects = [], []
        for f in self.files.values():
            if f.pending:
                frame, bad = parse_lines(f.pending, f.pos.path, self.ingestor.endpoint, self.ingestor.max_depth)
                frames.append(frame)
                rejects += bad
        if frames or rejects:
            self.ingestor.commit(pl.concat(frames) if frames else empty_frame(), rejects)
        for f in self.files.values():
            f.pending.clear()
            f.pos.offset, f.pos.line = f.reader.line_start, f.reader.next_line
        done = [ident for ident, f in self.files.items() if f.finished]
        for ident in done:
            self.files.pop(ident).fh.close()
        positions = [f.pos for f in self.files.values()]
        if positions != self._last_saved:
            checkpoint.save(self.checkpoint_path, positions)
            self._last_saved = [Position(**vars(p)) for p in positions]

    def close(self) -> None:
        for f in self.files.values():
            f.fh.close()
        self.files.clear()

    # ---- files

    def _candidates(self) -> list[Path]:
        out = []
        for target in self.targets:
            if target.is_dir():
                out += sorted({p for pat in PATTERNS["jsonl"] for p in target.glob(pat) if p.is_file()})
            elif target.exists():
                out.append(target)
        return out

    def _discover(self) -> set[tuple[int, int]]:
        """Open files newly under a followed name; returns the identities under one now."""
        named = set()
        for path in self._candidates():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            ident = (st.st_dev, st.st_ino)
            named.add(ident)
            if ident in self.files:
                self.files[ident].pos.path = str(path)
            else:
                self._open(path, ident)
        return named

    def _open(self, path: Path, ident: tuple[int, int]) -> None:
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            return
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != ident:  # replaced between stat and open: next poll
            fh.close()
            return
        saved = self._saved.pop(ident, None)
        if saved and head_matches(fh.fileno(), saved) and saved.offset <= st.st_size:
            pos = saved
            pos.path = str(path)
        else:  # new file, or a reused inode / rewritten file: from the start
            fp, fp_len = head_fingerprint(fh.fileno(), st.st_size)
            pos = Position(ident[0], ident[1], fp, fp_len, 0, 1, str(path))
        reader = LineReader(fh, pos.offset, pos.line, self.ingestor.max_line_bytes)
        self.files[ident] = _Followed(pos, fh, reader)
        self.files_seen += 1

    def _resume_rotated(self) -> None:
        """Files in the checkpoint that were renamed while we were down: find them by inode."""
        for ident, saved in list(self._saved.items()):
            folder = Path(saved.path).parent
            for path in folder.iterdir() if folder.is_dir() else ():
                try:
                    st = path.stat()
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == ident and path.is_file():
                    self._open(path, ident)
                    break

    def _read(self, f: _Followed) -> None:
        fd = f.fh.fileno()
        size = os.fstat(fd).st_size
        if size < f.reader.pos or not head_matches(fd, f.pos):
            self._restart(f, size)
        elif f.pos.fp_len < checkpoint.FINGERPRINT_BYTES and size > f.pos.fp_len:
            f.pos.fp, f.pos.fp_len = head_fingerprint(fd, size)  # the head grew: fingerprint more of it
        before = f.reader.pos
        f.pending.extend(f.reader.read(max_bytes=READ_PER_POLL_BYTES))
        if f.reader.pos != before:
            f.last_growth = time.monotonic()

    def _restart(self, f: _Followed, size: int) -> None:
        """Truncated or rewritten in place: keep what was read, then start over at byte 0.

        Lines already read from the old content stay pending and are committed with the next
        flush; flushing now just makes that window as short as possible.
        """
        try:
            self.flush()
        except OSError as exc:
            self.warn(f"flush failed, will retry: {exc}")
        fp, fp_len = head_fingerprint(f.fh.fileno(), size)
        f.pos.fp, f.pos.fp_len, f.pos.offset, f.pos.line = fp, fp_len, 0, 1
        f.reader.reset(0, 1)
        f.last_growth = time.monotonic()

    def _finish(self, f: _Followed) -> None:
        """A rotated-away file that stopped growing: take its unterminated last line too."""
        if f.finished:
            return
        f.pending.extend(f.reader.read(final=True))
        f.finished = True

    def _pending(self) -> int:
        return sum(len(f.pending) for f in self.files.values())
