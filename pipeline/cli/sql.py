"""`wattline sql` (being built)."""

import click


@click.command("sql")
def command() -> None:
    raise click.ClickException("not built yet")
