"""`wattline ui`: the Dagster web UI and daemon (schedule + sensor) on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from collectors.names import remote_listen_problem, remote_listen_warning
from collectors.printable import printable
from collectors.settings import AUTOMATION_ENV, DATA_DIR_ENV, FIRST_DAY_ENV, load
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
    env.setdefault(FIRST_DAY_ENV, "data")  # the partitions start where the data starts
    dagster = str(Path(sys.executable).parent / "dagster")
    # Dagster's own services at INFO; runs print INFO events (dagster.yaml python_logs), not step DEBUG
    args = [dagster, "dev", "-m", "pipeline.definitions", "--host", host, "--port", str(port), "--log-level", "info"]
    warning = remote_listen_warning(host, "the Dagster UI (it launches runs that write the data dir, and the schedule and sensor start on)")
    if warning:
        click.echo(printable(warning), err=True)
    click.echo(f"Dagster UI on http://{printable(host)}:{port} (DAGSTER_HOME={printable(env['DAGSTER_HOME'])}); Ctrl-C stops it",
               err=True)
    click.echo(printable(automation_line(data_dir, env)), err=True)
    os.execve(dagster, args, env)


def automation_line(data_dir, env: dict[str, str]) -> str:
    """One line: whether the schedule and sensors start on, and what the sensor would launch now."""
    settings = load()
    if not settings.automation:
        return (f"automation off ({AUTOMATION_ENV}=off): the schedule and sensors start stopped; "
                "nothing runs until you launch a run or start them (Automation tab)")
    from dagster import DagsterInstance

    from collectors.days import today_utc
    from pipeline.remote import is_s3
    from pipeline.sensors import cluster_days_to_build

    on = (f"automation on: new_parquet_sensor (every 2 min) builds completed days whose raw files are new or changed, {{now}}; "
          f"daily_schedule builds yesterday at {settings.schedule_hour:02d}:15 UTC unless built from its current files; fleet-days follow their cluster-days; "
          f"{AUTOMATION_ENV}=off starts them stopped")
    if is_s3(data_dir):
        return on.format(now="from its first tick")
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        with DagsterInstance.get() as instance:
            _, changed, todo = cluster_days_to_build(instance, data_dir, {}, today_utc())
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous
    days = sorted({d for d, _ in todo})
    now = (f"now {len(todo)} cluster-day run(s) for {', '.join(days)}" if todo
           else f"now nothing (the {len(changed)} completed day(s) with data are built from their current files)")
    return on.format(now=now)
