"""`wattline run` (being built)."""

import click


@click.command("run")
def command() -> None:
    raise click.ClickException("not built yet")
