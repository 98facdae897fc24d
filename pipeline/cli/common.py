"""Options and errors shared by every subcommand."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import click

from collectors.inventory import InventoryError
from collectors.printable import printable
from collectors.settings import DATA_DIR_ENV
from collectors.storage import resolve_data_root
from pipeline import warehouse
from pipeline.constants import WAREHOUSE_FILE

LINE_CHARS = 20_000
"""Cap for a whole summary line built by another module (``printable``'s default is per piece of outside text)."""


class UserError(click.ClickException):
    """A mistake the user can fix: printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {printable(self.format_message())}", err=True)


class Interrupted(UserError):
    """Stopped by Ctrl-C: one line, exit code 130 (128 + SIGINT, what shells report)."""

    exit_code = 130


def check_data_dir(data_dir, access: str):
    """One `error:` line when a local data dir cannot serve a command: it is a file (or under one),
    cannot be read (``access="read"``: sql, report), or cannot be created or written (``"write"``:
    every command that adds files). A missing dir is left to the reader to explain; a writer
    creates it. S3 prefixes are checked by their first request."""
    if not isinstance(data_dir, Path):
        return data_dir
    existing = data_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == data_dir and not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} is a file, not a folder (pass --data-dir a folder)")
    if not existing.is_dir():
        raise UserError(f"data dir {data_dir} cannot exist: {existing} is a file")
    if access == "read":
        if existing == data_dir and not os.access(data_dir, os.R_OK | os.X_OK):
            raise UserError(f"data dir {data_dir} is not readable (permissions)")
        return data_dir
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == data_dir else f"cannot be created: {existing} is not writable"
        raise UserError(f"data dir {data_dir} {what} (permissions or a read-only filesystem)")
    return data_dir


def data_dir_option(func=None, *, access: str = "write"):
    """`--data-dir DIR|s3://bucket/prefix` (env WATTLINE_DATA_DIR, default ./data): an absolute
    Path for a local folder, the URL string for S3 (docs/storage.md). ``access``: what the command
    needs of it, checked here (:func:`check_data_dir`): "write" (the default) or "read"."""
    if func is None:
        return lambda f: data_dir_option(f, access=access)
    return click.option(
        "--data-dir",
        "data_dir",
        type=str,
        metavar="DIR|s3://BUCKET/PREFIX",
        envvar=DATA_DIR_ENV,
        default=None,
        show_default="./data",
        help=f"Data directory, or an S3-compatible bucket prefix (env {DATA_DIR_ENV}).",
        callback=lambda ctx, param, value: check_data_dir(resolve_data_root(value), access),
    )(func)


def parse_date(value: str) -> str:
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        raise UserError(f"bad date {value!r}: expected YYYY-MM-DD") from None


def date_option(func):
    return click.option(
        "--date",
        "date",
        required=True,
        metavar="YYYY-MM-DD",
        help="The day (UTC) to process.",
        callback=lambda ctx, param, value: parse_date(value),
    )(func)


def refresh_stale_catalog(data_dir: Path | str) -> None:
    """For writers other than ``run`` (which always republishes): rebuild ``warehouse.duckdb``
    when it exists but was built for another folder (the data dir was moved or copied),
    is damaged or older, since readers never write it (pipeline/readonly.py)."""
    if not isinstance(data_dir, Path) or not data_dir.is_dir():
        return  # S3: the catalog lives in each reader's work dir
    try:
        if warehouse.publish_if_stale(data_dir):
            click.echo(f"note: rebuilt {WAREHOUSE_FILE} for {printable(data_dir)} (it was built for another folder, or damaged)", err=True)
    except InventoryError as exc:
        click.echo(f"note: {WAREHOUSE_FILE} not rebuilt: {printable(' '.join(str(exc).split()))}", err=True)
