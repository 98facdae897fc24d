"""`wattline ui` (being built)."""

import click


@click.command("ui")
def command() -> None:
    raise click.ClickException("not built yet")
