"""`wattline check`: judge Parquet files against the data contract, touching no data dir.

For people writing their own exporters: the verdict is the one the pipeline reaches
(``collectors.contract.inspect_file``, the same function its quarantine calls).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from collectors.contract import DATASETS, inspect_file
from collectors.settings import load
from pipeline.cli.common import UserError
from pipeline.datadir import link_reason


def dataset_of(path: Path) -> str | None:
    """The dataset a file's path names (``…/power/date=…/…``), innermost folder first."""
    for part in reversed(path.resolve().parts[:-1] if path.suffix else path.resolve().parts):
        if part in DATASETS:
            return part
    return None


def _files(target: Path) -> tuple[list[Path], list[Path]]:
    """(the .parquet files under ``target``, the symbolic links met on the way: not followed, as
    the pipeline does not read through them). A target named on the command line is read even
    when it is a link."""
    if not target.is_dir():
        return [target], []
    files: list[Path] = []
    links: list[Path] = []
    for folder, dirs, names in os.walk(target, followlinks=False):
        here = Path(folder)
        links += [here / d for d in dirs if (here / d).is_symlink()]
        for name in names:
            path = here / name
            if path.is_symlink():
                if name.endswith(".parquet"):
                    links.append(path)
            elif name.endswith(".parquet") and path.is_file():
                files.append(path)
    return sorted(files), sorted(links)


@click.command("check")
@click.argument("targets", nargs=-1, required=True, metavar="FILE|DIR...")
@click.option("--dataset", type=click.Choice(sorted(DATASETS)), default=None,
              help="The contract to check against; default: the dataset folder in each file's path (power/…).")
def command(targets: tuple[str, ...], dataset: str | None) -> None:
    """Check Parquet files against the data contract without reading or writing a data dir.

    Prints one line per file: `ok` (used as is; absent nullable columns read as NULL), `casts`
    (used after lossless conversions, each named), `partial` (used without its rows whose required
    value is null), `quarantine` (would be set aside, with why: drift, or more rows than
    WATTLINE_MAX_FILE_ROWS, seen in the footer before anything is read) or `link` (a symbolic
    link met inside a folder: not followed, the pipeline does not read it). Exit 0 when every file
    would be used whole, 1 otherwise, 2 for usage errors.
    """
    try:
        max_rows = load().max_file_rows
    except ValueError as exc:
        raise UserError(str(exc)) from None
    files: list[tuple[Path, str]] = []
    links: list[Path] = []
    for target in map(Path, targets):
        if not target.exists():
            raise UserError(f"no such file or directory: {target}")
        found, met = _files(target)
        links += met
        if not found and not met:
            raise UserError(f"no .parquet file under {target}")
        for f in found:
            name = dataset or dataset_of(f)
            if name is None:
                raise UserError(f"cannot tell the dataset of {f} from its path: pass --dataset {'|'.join(sorted(DATASETS))}")
            files.append((f, name))
    rejected = partial = 0
    for link in links:
        click.echo(f"link        {link}: {link_reason(os.readlink(link))}")
    for path, name in files:
        verdict = inspect_file(path, DATASETS[name].schema, max_rows)
        if not verdict.usable:
            rejected += 1
            click.echo(f"quarantine  {path} ({name}): {'; '.join(verdict.problems)}")
        elif verdict.null_rows:
            partial += 1
            click.echo(f"partial     {path} ({name}): {'; '.join(verdict.notes())}")
        elif verdict.quiet:
            click.echo(f"ok          {path} ({name})" + (f": {'; '.join(verdict.notes())}" if verdict.absent else ""))
        else:
            click.echo(f"casts       {path} ({name}): {'; '.join(verdict.notes())}")
    used = len(files) - rejected
    parts = [f"{rejected} quarantined"]
    if partial:
        parts.append(f"{partial} with rows set aside")
    if links:
        parts.append(f"{len(links)} symbolic link(s) not followed")
    click.echo(f"{used} of {len(files)} file(s) would be used, {', '.join(parts)}", err=True)
    if rejected or partial or links:
        raise SystemExit(1)
