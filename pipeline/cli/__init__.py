"""The `wattline` command: one click group, one module per subcommand.

User mistakes (bad date, empty data dir, unknown table) end as one line on stderr and a
non-zero exit, never a traceback: a subcommand raises ``pipeline.cli.common.UserError``.
"""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """wattline: GPU power telemetry and LLM request logs → swings, phases, energy, headroom."""


def _register() -> None:
    # Each subcommand lives in its own module; adding one is one line here.
    from pipeline.cli import alert_rules, check, collect, demo, import_, ingest, report, run, simulate, sql, ui

    for module in (simulate, collect, alert_rules, import_, ingest, check, run, sql, ui, demo, report):
        main.add_command(module.command)


_register()

