"""`wattline demo` (being built)."""

import click


@click.command("demo")
def command() -> None:
    raise click.ClickException("not built yet")
