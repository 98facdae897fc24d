"""Options and errors shared by every subcommand."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from collectors.inventory import InventoryError
from collectors.storage import resolve_data_root
from pipeline import warehouse
from pipeline.constants import DATA_DIR_ENV, WAREHOUSE_FILE


class UserError(click.ClickException):
    """A mistake the user can fix: printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def data_dir_option(func):
    """`--data-dir DIR|s3://bucket/prefix` (env WATTLINE_DATA_DIR, default ./data): an absolute
    Path for a local folder, the URL string for S3 (docs/storage.md)."""
    return click.option(
        "--data-dir",
        "data_dir",
        type=str,
        metavar="DIR|s3://BUCKET/PREFIX",
        envvar=DATA_DIR_ENV,
        default=None,
        show_default="./data",
        help=f"Data directory, or an S3-compatible bucket prefix (env {DATA_DIR_ENV}).",
        callback=lambda ctx, param, value: resolve_data_root(value),
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
            click.echo(f"note: rebuilt {WAREHOUSE_FILE} for {data_dir} (it was built for another folder, or damaged)", err=True)
    except InventoryError as exc:
        click.echo(f"note: {WAREHOUSE_FILE} not rebuilt: {' '.join(str(exc).split())}", err=True)
