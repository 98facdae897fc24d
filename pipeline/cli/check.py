"""`wattline check`: judge Parquet files against the data contract, touching no data dir.

For people writing their own exporters: the verdict is the one the pipeline reaches
(``collectors.contract.inspect_file``, the same function its quarantine calls).
"""

from __future__ import annotations

from pathlib import Path

import click

from collectors.contract import DATASETS, inspect_file
from pipeline.cli.common import UserError


def dataset_of(path: Path) -> str | None:
    """The dataset a file's path names (``…/power/date=…/…``), innermost folder first."""
    for part in reversed(path.resolve().parts[:-1] if path.suffix else path.resolve().parts):
        if part in DATASETS:
            return part
    return None


def _files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*.parquet") if p.is_file())
    return [target]


@click.command("check")
@click.argument("targets", nargs=-1, required=True, metavar="FILE|DIR...")
@click.option("--dataset", type=click.Choice(sorted(DATASETS)), default=None,
              help="The contract to check against; default: the dataset folder in each file's path (power/…).")
def command(targets: tuple[str, ...], dataset: str | None) -> None:
    """Check Parquet files against the data contract without reading or writing a data dir.

    Prints one line per file: `ok` (used as is; absent nullable columns read as NULL), `casts`
    (used after lossless conversions, each named) or `quarantine` (would be set aside, with why). Exit 0 when every file would be used,
    1 when one would be quarantined, 2 for usage errors.
    """
    files: list[tuple[Path, str]] = []
    for target in map(Path, targets):
        if not target.exists():
            raise UserError(f"no such file or directory: {target}")
        found = _files(target)
        if not found:
            raise UserError(f"no .parquet file under {target}")
        for f in found:
            name = dataset or dataset_of(f)
            if name is None:
                raise UserError(f"cannot tell the dataset of {f} from its path: pass --dataset {'|'.join(sorted(DATASETS))}")
            files.append((f, name))
    rejected = 0
    for path, name in files:
        verdict = inspect_file(path, DATASETS[name].schema)
        if not verdict.usable:
            rejected += 1
            click.echo(f"quarantine  {path} ({name}): {'; '.join(verdict.problems)}")
        elif verdict.quiet:
            click.echo(f"ok          {path} ({name})" + (f": {'; '.join(verdict.notes())}" if verdict.absent else ""))
        else:
            click.echo(f"casts       {path} ({name}): {'; '.join(verdict.notes())}")
    used = len(files) - rejected
    click.echo(f"{used} of {len(files)} file(s) would be used, {rejected} quarantined", err=True)
    if rejected:
        raise SystemExit(1)
