"""Text put into SQL: string literals and file paths, quoted in one place.

DuckDB reads every path given to ``read_parquet``/``glob`` as a glob pattern, including the
data dir's own part: a data dir named ``d*`` would read its siblings' files and one named
``d[1]`` would match ``d1``. :func:`path_literal` and :func:`pattern_literal` escape the literal
part (``*`` → ``[*]``, ``?`` → ``[?]``, ``[`` → ``[[]``, DuckDB's and Python's glob syntax
alike), so only the wildcards wattline writes after the root are wildcards.
"""

from __future__ import annotations

import os

_GLOB_ESCAPES = {"*": "[*]", "?": "[?]", "[": "[[]"}


def literal(value: object) -> str:
    """A SQL string literal: ``'o''brien'``."""
    return "'" + str(value).replace("'", "''") + "'"


def glob_escape(text: str | os.PathLike) -> str:
    """``text`` as a glob pattern that matches exactly itself."""
    return "".join(_GLOB_ESCAPES.get(ch, ch) for ch in os.fspath(text))


def path_literal(path: str | os.PathLike) -> str:
    """One file's path as a literal for ``read_parquet``/``glob``: matches that file only."""
    return literal(glob_escape(path))


def pattern_literal(root: str | os.PathLike, pattern: str) -> str:
    """``root/pattern`` as a literal: ``root`` taken literally, ``pattern``'s wildcards kept."""
    return literal(glob_escape(root) + "/" + pattern)
