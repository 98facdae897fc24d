"""`wattline simulate` (being built)."""

import click


@click.command("simulate")
def command() -> None:
    raise click.ClickException("not built yet")
