"""Text from outside made safe to print: control characters escaped, so a value can never forge a line.

An endpoint attribute, a server's error text or a file name may carry ``\\n``, ``\\r``, ANSI
escapes or other control characters; printed raw, ``"x\\nerror: forged"`` would put a line in
the log that wattline never wrote. Everything we print that came from outside goes through
:func:`printable`.
"""

from __future__ import annotations

import unicodedata

MAX_PRINTED_CHARS = 2000
"""Longest outside text printed in one message; the rest is replaced by a count."""


def printable(value: object, limit: int = MAX_PRINTED_CHARS) -> str:
    """``str(value)`` with every control or format character (Unicode categories Cc, Cf, Zl, Zp:
    newlines, escapes, bidi overrides) written as ``\\xNN`` / ``\\uNNNN`` and at most ``limit``
    characters kept (``…(N more characters)``)."""
    text = value if isinstance(value, str) else str(value)
    more = len(text) - limit
    if more > 0:
        text = text[:limit]
    out = []
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    if more > 0:
        out.append(f"…({more} more characters)")
    return "".join(out)
