"""Names that become path segments, paths built from them, and the addresses listeners bind.

Host and cluster names end up in file paths (``power/date=D/host=H/``,
``derived/<table>/date=D/cluster=C/``), in hive partition keys and in DuckDB glob patterns.
They follow one rule, checked wherever a name enters (inventory, ``--host``, importers,
receivers): letters (any script), digits, ``.``, ``_`` and ``-``; at most 128 characters; not
starting with ``.`` or ``-``. That leaves out ``/`` and ``\\`` (a path), ``..`` as a whole
name, ``=`` (hive's key=value), ``*?[]{}`` (globs), quotes, spaces and control characters.

Names that never become paths (endpoint, job, model: ``Qwen/Qwen3-8B`` is a real vLLM endpoint
name) stay free-form and must never be used to build one.

Every path built from a name goes through :func:`inside`, which also asserts that the result
lies inside the root it was built under.
"""

from __future__ import annotations

import ipaddress
import os
import unicodedata
from pathlib import Path, PurePosixPath

MAX_NAME_CHARS = 128
PATH_NAME_RULE = (
    "letters, digits, '.', '_' and '-', at most 128 characters, not starting with '.' or '-'"
)


class BadName(ValueError):
    """A name that cannot be a path segment; the message names the value and where it came from."""


def _allowed(ch: str) -> bool:
    if ch in "._-":
        return True
    if ch.isascii():
        return ch.isalnum()
    return unicodedata.category(ch)[0] in "LN"  # letters and digits of any script


def path_name_problem(value: object) -> str | None:
    """Why ``value`` breaks the path-name rule, or None when it follows it."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if len(value) > MAX_NAME_CHARS:
        return f"is {len(value)} characters long (at most {MAX_NAME_CHARS})"
    if value[0] in ".-":
        return f"starts with {value[0]!r}"
    bad = sorted({ch for ch in value if not _allowed(ch)})
    if bad:
        shown = ", ".join(repr(ch) for ch in bad[:5])
        return f"contains {shown}"
    return None


def check_path_name(value: object, where: str) -> str:
    """``value`` if it follows the path-name rule, else :class:`BadName` naming it and ``where``
    it came from (``"--host"``, ``"inventory.yaml clusters[2].name"``)."""
    problem = path_name_problem(value)
    if problem:
        raise BadName(f"{where}: name {value!r} {problem}; names used in paths allow {PATH_NAME_RULE}")
    return value  # type: ignore[return-value]


def inside(root: str | os.PathLike, *segments: str) -> Path:
    """``root/segment/...`` for segments of the data layout (``host=h0``, ``date=2026-12-01``):
    each segment's name part is checked, and the result must lie inside ``root``."""
    base = Path(root).resolve()
    path = base
    for seg in segments:
        _check_segment(seg)
        path = path / seg
    resolved = path.resolve()
    if resolved != base and base not in resolved.parents:
        raise BadName(f"path {resolved} would lie outside {base}")
    return path


def inside_key(*segments: str) -> str:
    """The same as :func:`inside` for object-store keys (POSIX, relative to the root)."""
    for seg in segments:
        _check_segment(seg)
    return str(PurePosixPath(*segments))


def _check_segment(seg: str) -> None:
    for part in PurePosixPath(seg).parts:  # a segment may be "a/b" for fixed sub-folders
        name = part.split("=", 1)[1] if "=" in part else part
        check_path_name(name, f"path segment {part!r}")


# --- listeners ------------------------------------------------------------------------------

LOOPBACK_HOSTS = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def remote_listen_problem(host: str, allow_remote: bool, what: str) -> str | None:
    """Why binding ``host`` is refused (None when allowed): every listener of the project binds
    loopback unless the user passes ``--allow-remote`` explicitly, since none has
    authentication."""
    if is_loopback(host) or allow_remote:
        return None
    return (f"{what} would listen on {host}, reachable from other machines, and it has no "
            "authentication; pass --allow-remote to do this on purpose (or bind 127.0.0.1)")


def remote_listen_warning(host: str, what: str) -> str | None:
    """The warning printed when a listener does bind a non-loopback address."""
    if is_loopback(host):
        return None
    return (f"warning: {what} listens on {host} without authentication: anyone who can reach "
            "it can use it")
