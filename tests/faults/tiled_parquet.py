"""A Parquet file of one row group written many times over, without encoding it again each time.

pyarrow spends ~50 ms of CPU encoding a million-row group however constant its values are, so a
10**9-row file takes ~50 s to write. Here the group is encoded once, its bytes are written
``copies`` times, and the footer (Thrift compact protocol) is pyarrow's own with its row group
repeated at the shifted offsets: byte for byte the file pyarrow's ParquetWriter writes when
given the same table ``copies`` times (tests/faults/test_hostile_files.py holds it to that).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"
# Compact protocol types.
TRUE, FALSE, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)

# The footer's fields that are offsets into the file (parquet.thrift): FileMetaData.row_groups
# (4) -> RowGroup.file_offset (5), RowGroup.columns (1) -> ColumnChunk.file_offset (2) and its
# offset/column index offsets (4, 6), ColumnChunk.meta_data (3) -> data/index/dictionary page
# and bloom filter offsets (9, 10, 11, 14).
ROW_GROUPS, ROW_GROUP_OFFSET, ROW_GROUP_ORDINAL, NUM_ROWS = 4, 5, 7, 3
COLUMNS, CHUNK_OFFSETS, CHUNK_META, META_OFFSETS = 1, (2, 4, 6), 3, (9, 10, 11, 14)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int):
        if kind in (TRUE, FALSE):  # a list element: one byte
            return self.byte()
        if kind == I8:
            return self.byte()
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            self.pos += 8
            return self.data[self.pos - 8:self.pos]
        if kind == BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if kind in (LIST, SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return elem, [self.value(elem) for _ in range(size)]
        if kind == STRUCT:
            return self.struct()
        raise ValueError(f"Thrift compact type {kind} not expected in a Parquet footer")

    def struct(self) -> list:
        """[(field id, type, value)] in the order written; a bool field's value is its type."""
        fields, last = [], 0
        while (head := self.byte()) != 0:
            kind, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            fields.append((fid, kind, None if kind in (TRUE, FALSE) else self.value(kind)))
            last = fid
        return fields


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append(n & 0x7F | 0x80)
        n >>= 7


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _value(kind: int, value) -> bytes:
    if kind in (TRUE, FALSE, I8):
        return bytes([value])
    if kind in (I16, I32, I64):
        return _zigzag(value)
    if kind == DOUBLE:
        return bytes(value)
    if kind == BINARY:
        return _varint(len(value)) + bytes(value)
    if kind in (LIST, SET):
        elem, items = value
        head = bytes([len(items) << 4 | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + _varint(len(items))
        return head + b"".join(_value(elem, v) for v in items)
    if kind == STRUCT:
        return _struct(value)
    raise ValueError(kind)


def _struct(fields: list) -> bytes:
    out, last = bytearray(), 0
    for fid, kind, value in fields:
        out += bytes([(fid - last) << 4 | kind]) if 0 < fid - last <= 15 else bytes([kind]) + _zigzag(fid)
        if kind not in (TRUE, FALSE):
            out += _value(kind, value)
        last = fid
    out.append(0)
    return bytes(out)


def _shifted(fields: list, offsets: tuple[int, ...], by: int) -> list:
    return [(fid, kind, value + by if fid in offsets and value else value) for fid, kind, value in fields]


def _row_group(fields: list, by: int, ordinal: int) -> list:
    out = []
    for fid, kind, value in _shifted(fields, (ROW_GROUP_OFFSET,), by):
        if fid == COLUMNS:
            elem, chunks = value
            value = (elem, [[(f, k, _shifted(v, META_OFFSETS, by) if f == CHUNK_META else v)
                             for f, k, v in _shifted(chunk, CHUNK_OFFSETS, by)] for chunk in chunks])
        elif fid == ROW_GROUP_ORDINAL:
            value = ordinal
        out.append((fid, kind, value))
    return out


def write_tiled(path: Path, group: pa.Table, copies: int, **writer_options) -> None:
    """``copies`` times ``group`` as ``copies`` row groups in one file: what
    ``ParquetWriter(path, group.schema, **writer_options)`` writes given ``group`` ``copies`` times."""
    one = io.BytesIO()
    with pq.ParquetWriter(one, group.schema, **writer_options) as writer:
        writer.write_table(group, row_group_size=group.num_rows)
    data = one.getvalue()
    footer_len = struct.unpack("<I", data[-8:-4])[0]
    body = data[len(MAGIC):-8 - footer_len]
    meta = _Reader(data[-8 - footer_len:-8]).struct()
    footer = []
    for fid, kind, value in meta:
        if fid == NUM_ROWS:
            value *= copies
        elif fid == ROW_GROUPS:
            elem, [only] = value
            value = (elem, [_row_group(only, k * len(body), k) for k in range(copies)])
        footer.append((fid, kind, value))
    encoded = _struct(footer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(MAGIC)
        for _ in range(copies):
            out.write(body)
        out.write(encoded + struct.pack("<I", len(encoded)) + MAGIC)
