"""Checks an OTLP body must pass before it is decoded, so that decoding has a known cost.

Decoding multiplies memory: a 20 MiB protobuf body of empty spans becomes 10 million messages,
1.8 GB once parsed, and 20 MiB of OTLP/JSON ``{}`` takes 1.7 GB and 40 s of CPU. The size of a
body does not bound its decoded size; the number of messages in it does. So before decoding:

* gzip is inflated in steps and stopped at the body limit (:func:`gunzip`), never inflated whole;
* protobuf: the wire format is walked along the schema, counting messages and their nesting,
  without building any (:func:`count_protobuf`); bodies too small to hold more messages than the
  limit (two bytes per message at least) are not walked;
* JSON: ``{``, ``[`` and ``,`` are counted (an upper bound of the values ``json`` will build), and
  the nesting is measured without recursion.

A body over a limit is refused with a one-line reason; nothing of it is kept.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.requests.otlp import BadBody

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
DEFAULT_MAX_ITEMS = 1_000_000
"""Messages (protobuf) or values (JSON) one body may hold. A vLLM span is ~30 messages (~60 JSON
values), so this admits ~16,000 spans per export: vLLM sends at most 512, an OpenTelemetry
Collector's batch processor 8192 by default. Decoded, 1,000,000 messages take at most ~180 MB
(measured: 175 bytes per empty span message; JSON ~250 MB)."""
MAX_DEPTH = 64
"""Deepest message (protobuf) or ``[``/``{`` (JSON) nesting: an llm_request span needs 6 to 8
(request → resource spans → scope spans → span → attribute → value); JSON decoding recurses per level."""
INFLATE_STEP = 1 << 20
"""Bytes inflated per step: the most a gzip body can exceed its limit by before it is stopped."""


class BodyTooLarge(BadBody):
    """A body over a size limit (HTTP 413): the exporter should send smaller batches."""


def gunzip(body: bytes, max_bytes: int, on_step=lambda n: None) -> bytes:
    """Inflate a gzip body step by step; :class:`BodyTooLarge` past ``max_bytes``.
    ``on_step(n)`` is told each step's size first (it may raise to stop, e.g. when memory is short)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    parts: list[bytes] = []
    size = 0
    data = body
    try:
        while True:
            chunk = d.decompress(data, INFLATE_STEP)
            data = d.unconsumed_tail
            if chunk:
                size += len(chunk)
                if size > max_bytes:
                    raise BodyTooLarge(f"body larger than {max_bytes} bytes after gzip")
                on_step(len(chunk))
                parts.append(chunk)
            if not data or not chunk:
                break
        if not d.eof:
            raise BadBody("bad gzip body (truncated)")
    except zlib.error as exc:
        raise BadBody(f"bad gzip body ({exc})") from None
    return b"".join(parts)


def check_body(body: bytes, content_type: str, max_items: int = DEFAULT_MAX_ITEMS, max_depth: int = MAX_DEPTH) -> None:
    """The item and depth checks an (already inflated) body passes before it is parsed:
    :class:`BodyTooLarge` or :class:`BadBody`."""
    if content_type == PROTOBUF:
        if len(body) // 2 > max_items:
            count_protobuf(body, max_items, max_depth)
        return
    check_json(body, max_items, max_depth)


def check_json(body: bytes, max_items: int, max_depth: int) -> None:
    items = body.count(b"{") + body.count(b"[") + body.count(b",")
    if items > max_items:
        raise BodyTooLarge(f"JSON body with more than {max_items} values (send smaller batches)")
    if body.count(b"{") + body.count(b"[") > max_depth and json_depth(body) > max_depth:
        raise BadBody(f"JSON nested too deep (over {max_depth} levels)")


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_depth(data: bytes, step: int = 1 << 20) -> int:
    """Deepest ``[``/``{`` nesting, brackets inside strings not counted; in 1 MiB steps, so the
    arrays it needs stay small whatever the body's size."""
    text = _JSON_STRING.sub(b'""', data)
    level, deepest = 0, 0
    for start in range(0, len(text), step):
        chunk = np.frombuffer(text, np.uint8, count=min(step, len(text) - start), offset=start)
        delta = (chunk == 0x5B).astype(np.int32) + (chunk == 0x7B) - (chunk == 0x5D) - (chunk == 0x7D)
        levels = np.cumsum(delta) + level
        if len(levels):
            deepest = max(deepest, int(levels.max()))
            level = int(levels[-1])
    return deepest


_MESSAGE_FIELDS: dict = {}


def _message_fields(descriptor) -> dict[int, object]:
    """Field number → message descriptor, for the fields of ``descriptor`` that are messages."""
    fields = _MESSAGE_FIELDS.get(descriptor.full_name)
    if fields is None:
        fields = {f.number: f.message_type for f in descriptor.fields if f.type == FieldDescriptor.TYPE_MESSAGE}
        _MESSAGE_FIELDS[descriptor.full_name] = fields
    return fields


def count_protobuf(body: bytes, max_items: int, max_depth: int,
                   descriptor=ExportTraceServiceRequest.DESCRIPTOR) -> int:
    """Messages in a protobuf body, by walking its wire format along the schema (nothing is built);
    :class:`BodyTooLarge` past ``max_items``, :class:`BadBody` when nested deeper than
    ``max_depth`` or not well formed."""
    buf = memoryview(body)
    stack = [(len(buf), _message_fields(descriptor))]
    pos, count = 0, 0
    end, fields = stack[-1]
    n = len(buf)
    while True:
        if pos >= end:
            if pos > end:
                raise BadBody("not an OTLP protobuf ExportTraceServiceRequest (a field runs past its message)")
            stack.pop()
            if not stack:
                return count
            end, fields = stack[-1]
            continue
        key, pos = _varint(buf, pos, n)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos, n)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, n)
            sub = fields.get(key >> 3)
            if sub is None:
                pos += length
            else:
                count += 1
                if count > max_items:
                    raise BodyTooLarge(f"protobuf body with more than {max_items} messages (send smaller batches)")
                if len(stack) >= max_depth:
                    raise BadBody(f"protobuf nested too deep (over {max_depth} levels)")
                if pos + length > end:
                    raise BadBody("not an OTLP protobuf ExportTraceServiceRequest (a message runs past its end)")
                stack.append((pos + length, _message_fields(sub)))
                end, fields = stack[-1]
        else:
            raise BadBody(f"not an OTLP protobuf ExportTraceServiceRequest (wire type {wire})")


def _varint(buf: memoryview, pos: int, n: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= n or shift > 63:
            raise BadBody("not an OTLP protobuf ExportTraceServiceRequest (truncated)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
