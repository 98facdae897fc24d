"""Outbound HTTP with a total deadline: a peer that trickles its answer cannot hold us past it.

A socket timeout bounds each read, not the answer: a server sending one byte a second resets it at
every byte and holds the caller forever. Here every read of an answer (status line, headers, body)
is bounded by what is left of one deadline on the monotonic clock, and the body by a size, so
each call ends by itself. Used by ``import prometheus`` (through urllib, so proxy variables still
apply) and by the collector's alert webhook (a kept-alive ``http.client`` connection).
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import time
import urllib.parse


class DeadlineExceeded(TimeoutError):
    """The peer did not finish its answer before the deadline."""


class AnswerTooLarge(OSError):
    """The answer's body is larger than the caller accepts."""


class _DeadlineIO(socket.SocketIO):
    """A socket's reading side whose every read waits at most min(per-read timeout, time left)."""

    def __init__(self, sock, deadline: float, per_read_s: float):
        super().__init__(sock, "rb")
        sock._io_refs += 1  # what socket.makefile counts: the socket stays open until this reader closes
        self._deadline = deadline
        self._per_read_s = per_read_s

    def readinto(self, b):
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline passed")
        self._sock.settimeout(min(self._per_read_s, left))
        try:
            return super().readinto(b)
        except TimeoutError:
            if time.monotonic() >= self._deadline:
                raise DeadlineExceeded("deadline passed") from None
            raise


class DeadlineResponse(http.client.HTTPResponse):
    """An ``HTTPResponse`` reading through :class:`_DeadlineIO`."""

    def __init__(self, sock, debuglevel=0, method=None, url=None, *, deadline: float, per_read_s: float):
        super().__init__(sock, debuglevel, method, url)
        self.fp.close()  # the plain reader made by the base class; ours holds the socket open instead
        self.fp = io.BufferedReader(_DeadlineIO(sock, deadline, per_read_s))


def bind_deadline(conn: http.client.HTTPConnection, deadline: float, per_read_s: float) -> None:
    """The next response of ``conn`` is read against ``deadline`` (``time.monotonic()`` seconds); the
    connection's own timeout (connect, send) is cut to what is left of it."""
    conn.response_class = functools.partial(DeadlineResponse, deadline=deadline, per_read_s=per_read_s)  # type: ignore[assignment]
    left = max(0.001, deadline - time.monotonic())
    conn.timeout = min(per_read_s, left)
    if conn.sock is not None:
        conn.sock.settimeout(conn.timeout)


def read_body(resp, max_bytes: int, chunk: int = 1 << 16) -> bytes:
    """The whole body in chunks (each read under the response's deadline), at most ``max_bytes``."""
    parts, size = [], 0
    while True:
        block = resp.read(chunk)
        if not block:
            return b"".join(parts)
        size += len(block)
        if size > max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes")
        parts.append(block)


def deadline_opener(deadline: float, per_read_s: float, *handlers):
    """A urllib opener (proxy variables honoured) whose HTTP and HTTPS answers are read against
    ``deadline``; ``handlers`` are added as ``build_opener`` adds them (e.g. one refusing redirects)."""
    import urllib.request

    def factory(base):
        def make(host, **kw):
            kw["timeout"] = min(per_read_s, max(0.001, deadline - time.monotonic()))
            conn = base(host, **kw)
            bind_deadline(conn, deadline, per_read_s)
            return conn
        return make

    class _Http(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(factory(http.client.HTTPConnection), req)

    class _Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(factory(http.client.HTTPSConnection), req, context=self._context)

    return urllib.request.build_opener(_Http(), _Https(), *handlers)


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable http(s)://HOST[:PORT][/path] address, or None."""
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port  # raises ValueError for a port that is not 0..65535
    except ValueError as exc:
        return str(exc)
    if u.scheme not in ("http", "https"):
        return "expected http:// or https://"
    if not u.hostname:
        return "no host"
    if port == 0:
        return "port 0"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "spaces or control characters in the address"
    return None
