"""`wattline import`: a group of importers, one subcommand each (`nvidia-smi` here; add others beside it)."""

from __future__ import annotations

from pathlib import Path

import click

from collectors.names import BadName, check_path_name
from pipeline.cli.common import UserError, data_dir_option, refresh_stale_catalog


@click.group("import")
def command() -> None:
    """Import power logs written by other tools into the `power` dataset."""


@command.command("nvidia-smi")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", required=True, help="Host the GPUs in these logs belong to (letters, digits, '.', '_', '-'; see docs/data-contract.md).")
@click.option("--tz", default=None, metavar="ZONE|±HH:MM",
              help="Zone of the logs' local timestamps (IANA name or UTC offset; default: this machine's zone).")
@click.option("--power-draw", type=click.Choice(["auto", "instant", "average"]), default="auto", show_default=True,
              help="What power.draw is: auto = average unless an instant column exists or the name column is GA100/pre-Ampere.")
@data_dir_option
def nvidia_smi(files: tuple[Path, ...], host: str, tz: str | None, power_draw: str, data_dir: Path) -> None:
    """Convert nvidia-smi --query-gpu CSV logs (csv or csv,nounits) to UTC power rows; bad lines are quarantined."""
    from collectors.nvidia_smi import ImportError_, import_files

    try:  # the host becomes the power/date=D/host=H folder: checked before anything is read
        check_path_name(host, "--host")
    except BadName as exc:
        raise UserError(str(exc)) from None
    try:
        res = import_files(list(files), data_dir, host, tz=tz, power_draw=power_draw)
    except ImportError_ as exc:
        raise UserError(str(exc)) from None
    click.echo(res.summary(host))
    refresh_stale_catalog(data_dir)
