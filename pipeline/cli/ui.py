"""`wattline ui`: the Dagster web UI and daemon (schedule + sensor) on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from collectors.names import remote_listen_problem, remote_listen_warning
from collectors.printable import printable
from collectors.settings import DATA_DIR_ENV
from pipeline import warehouse
from pipeline.cli.common import UserError, data_dir_option


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind; anything but loopback needs --allow-remote.")
@click.option("--port", type=int, default=3000, show_default=True)
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback --host: the UI has no login, and whoever reaches it can launch runs that write the data dir.")
@data_dir_option
def command(host: str, port: int, allow_remote: bool, data_dir) -> None:
    """Start `dagster dev` (webserver + daemon) for the pipeline, DAGSTER_HOME = <data-dir>/.dagster.

    The daily schedule and the new-Parquet sensor start RUNNING; turn them off in the UI
    (Automation tab) or start with WATTLINE_AUTOMATION=off.
    """
    from pipeline.remote import is_s3
    from pipeline.runner import dagster_home
    from pipeline.warehouse import reader_dir

    problem = remote_listen_problem(host, allow_remote, "the Dagster UI (it launches runs that write the data dir)")
    if problem:
        raise UserError(problem)

    if is_s3(data_dir):  # runs stage and publish through the bucket; the UI's reads use a mirror
        reader_dir(data_dir)
    elif not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist (run `wattline simulate` first, or pass --data-dir)")
    elif not warehouse.has_data(data_dir):
        click.echo(f"note: {printable(data_dir)} has no Parquet yet; the UI starts, but there is nothing to materialize", err=True)
    env = dict(os.environ, DAGSTER_HOME=str(dagster_home(data_dir)), **{DATA_DIR_ENV: str(data_dir)})
    dagster = str(Path(sys.executable).parent / "dagster")
    args = [dagster, "dev", "-m", "pipeline.definitions", "--host", host, "--port", str(port)]
    warning = remote_listen_warning(host, "the Dagster UI (it launches runs that write the data dir, and the schedule and sensor start on)")
    if warning:
        click.echo(printable(warning), err=True)
    click.echo(f"Dagster UI on http://{printable(host)}:{port} (DAGSTER_HOME={printable(env['DAGSTER_HOME'])}); Ctrl-C stops it",
               err=True)
    os.execve(dagster, args, env)
