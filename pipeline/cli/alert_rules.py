"""`wattline alert-rules --alerts FILE`: the collector's alert rules as a Prometheus alerting-rules file."""

from __future__ import annotations

from pathlib import Path

import click

from collectors.nvml.alerts import AlertsError, load_alerts, prometheus_rules_yaml
from collectors.printable import printable
from pipeline.cli.common import UserError


@click.command("alert-rules")
@click.option("--alerts", "alerts_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The rules file given to `wattline collect --alerts`.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Prometheus rules here instead of stdout.")
def command(alerts_file: Path, out: Path | None) -> None:
    """Write the same rules as Prometheus alerting rules over the collector's exported metrics (for
    sites that route alerts through Alertmanager)."""
    try:
        text = prometheus_rules_yaml(load_alerts(alerts_file))
    except AlertsError as exc:
        raise UserError(str(exc)) from None
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"wrote {printable(out)} ({text.count('- alert:')} rule(s))")
