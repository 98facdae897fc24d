"""Complete lines out of a growing file, with bounded memory per line.

A :class:`LineReader` owns an open file handle (so a file renamed away by log rotation is
still read to its end) and remembers a partial last line between calls: it yields only lines
that end in ``\\n`` until told the file is final. A line longer than ``max_line_bytes`` is
never held in memory: its first ``keep_prefix_bytes`` are kept and the rest is skipped up to the
next newline, so a 1 GB line costs one read buffer.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

DEFAULT_MAX_LINE_BYTES = 1 << 20
"""1 MiB: far above any real request record, far below anything that hurts memory."""
KEEP_PREFIX_BYTES = 4096
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Line:
    """One line: ``data`` without its newline; ``too_long`` when only a prefix was kept."""

    number: int  # 1-based line number in the file
    start: int  # byte offset of its first byte
    end: int  # byte offset just past its newline (where the next line starts)
    data: bytes
    length: int  # full length in bytes, newline excluded
    too_long: bool = False
    complete: bool = True  # False: the file ended without a newline after it


class LineReader:
    """Reads ``fh`` from ``offset`` (a line start, numbered ``line_number``) onwards."""

    def __init__(
        self,
        fh: BinaryIO,
        offset: int = 0,
        line_number: int = 1,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        keep_prefix_bytes: int = KEEP_PREFIX_BYTES,
    ) -> None:
        self.fh = fh
        self.max_line_bytes = max_line_bytes
        self.keep_prefix_bytes = min(keep_prefix_bytes, max_line_bytes)
        self.reset(offset, line_number)

    def reset(self, offset: int, line_number: int = 1) -> None:
        self.pos = offset  # bytes consumed from the file so far
        self.next_line = line_number
        self._line_start = offset
        self._buf = bytearray()  # the current partial line (or kept prefix when skipping)
        self._skipped = 0  # bytes of the current line dropped after the prefix

    @property
    def line_start(self) -> int:
        """Offset of the first line not yet yielded: where a restart must resume."""
        return self._line_start

    @property
    def pending_bytes(self) -> int:
        return len(self._buf) + self._skipped

    def read(self, final: bool = False, max_bytes: int | None = None) -> Iterator[Line]:
        """Yield every complete line available now; with ``final`` also an unterminated last line."""
        self.fh.seek(self.pos)
        budget = max_bytes
        while budget is None or budget > 0:
            chunk = self.fh.read(READ_BYTES if budget is None else min(READ_BYTES, budget))
            if not chunk:
                break
            if budget is not None:
                budget -= len(chunk)
            self.pos += len(chunk)
            yield from self._split(chunk)
        if final and self.pending_bytes:
            yield self._emit(self.pos, complete=False)

    def _split(self, chunk: bytes) -> Iterator[Line]:
        chunk_start = self.pos - len(chunk)
        at = 0
        while True:
            nl = chunk.find(b"\n", at)
            piece = chunk[at:] if nl < 0 else chunk[at:nl]
            self._append(piece)
            if nl < 0:
                return
            at = nl + 1
            yield self._emit(chunk_start + at)

    def _append(self, piece: bytes) -> None:
        if len(self._buf) + self._skipped + len(piece) <= self.max_line_bytes:
            self._buf += piece
            return
        # Over the limit (now or earlier): keep only the prefix, count the rest.
        room = self.keep_prefix_bytes - len(self._buf)
        if room < 0:
            self._skipped += -room
            del self._buf[self.keep_prefix_bytes :]
            room = 0
        self._buf += piece[:room]
        self._skipped += len(piece) - min(room, len(piece))

    def _emit(self, end: int, complete: bool = True) -> Line:
        data = bytes(self._buf)
        length = len(data) + self._skipped
        too_long = length > self.max_line_bytes
        line = Line(self.next_line, self._line_start, end, data, length, too_long, complete)
        self.next_line += 1
        self._line_start = end
        self._buf.clear()
        self._skipped = 0
        return line


@dataclass(frozen=True)
class Block:
    """Many complete lines at once (for vectorised parsers); only a file's last block may lack the final newline."""

    data: bytes
    first_line: int
    n_lines: int
    end: int  # byte offset just past the block


def iter_blocks(
    fh: BinaryIO,
    block_bytes: int = 8 << 20,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    start: int = 0,
    line_no: int = 1,
) -> Iterator[Block | Line]:
    """Blocks of whole lines of ``fh`` from ``start`` (line ``line_no``), with the memory of one block.

    Single :class:`Line` objects are always too long. A line over ``max_line_bytes`` comes out alone as a :class:`Line` (``too_long``, only its
    prefix kept, read through a :class:`LineReader`), so the caller quarantines it rather than
    parsing it; the lines around it still come in blocks.
    """
    fh.seek(start)
    carry = b""
    while True:
        chunk = fh.read(block_bytes)
        data = carry + chunk
        if not data:
            return
        if not chunk and len(data) <= max_line_bytes:  # an unterminated last line
            yield Block(data, line_no, 1, start + len(data))
            return
        if not chunk or (len(data) > max_line_bytes and b"\n" not in data):
            # One endless line: the line reader bounds it.
            line = next(LineReader(fh, start, line_no, max_line_bytes).read(final=True))
            yield line
            if not chunk:
                return
            fh.seek(line.end)
            start, line_no, carry = line.end, line.number + 1, b""
            continue
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        body, carry = data[: cut + 1], data[cut + 1 :]
        n = body.count(b"\n")
        if len(body) > max_line_bytes and max(map(len, body.split(b"\n"))) > max_line_bytes:
            yield from _runs(LineReader(io.BytesIO(body), 0, line_no, max_line_bytes).read(), start)
        else:
            yield Block(body, line_no, n, start + len(body))
        start += len(body)
        line_no += n


def _runs(lines: Iterator[Line], base: int) -> Iterator[Block | Line]:
    """Regroup lines (offsets relative to ``base``) into blocks, around the too-long ones."""
    run: list[Line] = []

    def block() -> Block:
        data = b"\n".join(ln.data for ln in run) + b"\n"
        return Block(data, run[0].number, len(run), base + run[-1].end)

    for line in lines:
        if line.too_long:
            if run:
                yield block()
                run = []
            yield Line(line.number, base + line.start, base + line.end, line.data, line.length, True)
        else:
            run.append(line)
    if run:
        yield block()
