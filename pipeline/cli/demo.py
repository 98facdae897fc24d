"""`wattline demo`: simulated fleet → every asset → report, in one command (`make demo`)."""

from __future__ import annotations

import datetime as dt
import time

import click

from collectors.days import run_day_problem
from collectors.printable import printable
from pipeline.cli.common import UserError, data_dir_option, parse_date
from pipeline.constants import warehouse_path
from pipeline.remote import local_dir

EXAMPLE_QUERIES = (
    "select level, entity, round(max(power_pct), 1) as peak_pct from fleet_power_1s where level in ('role', 'cluster') group by all order by 1, 2",
    "select i.role, round(avg(p.mean_w)) as mean_w, round(max(p.max_w)) as max_w from power_1s p join inventory_gpus i using (host, gpu) group by all",
    "select endpoint, count(*) as requests, round(median(prompt_tokens)) as median_prompt, "
    "round(median(output_tokens)) as median_output from requests group by all order by 1",
)


@click.command("demo")
@click.option("--date", "date", default=None, metavar="YYYY-MM-DD", help="Day to simulate (default: yesterday, UTC).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fleet", default="demo", show_default=True, help="demo, tiny, or an inventory YAML.")
@click.option("--hours", type=float, default=None, help="Simulate only the first H hours of the day.")
@click.option(
    "--shape", type=click.Choice(["simple", "collector"]), default="simple", show_default=True, help="Power rows as `wattline simulate --shape` writes them."
)
@data_dir_option
def command(date: str | None, seed: int, fleet: str, hours: float | None, shape: str, data_dir) -> None:
    """Simulate one day of a mixed GPU fleet, materialize every asset, write the report."""
    from collectors.simulate import simulate
    from pipeline.runner import run_day
    from reports.daily import default_out_dir

    day = parse_date(date) if date else (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
    if run_day_problem(day):
        raise UserError(run_day_problem(day))
    t0 = time.monotonic()
    summary = simulate(data_dir, start=dt.date.fromisoformat(day), days=1, seed=seed, fleet=fleet, hours=hours, shape=shape)
    click.echo(f"simulated {day}: {summary.line()} in {time.monotonic() - t0:.0f} s")
    t1 = time.monotonic()
    outcome = run_day(data_dir, day)  # cluster-days in parallel worker processes, then the fleet-day
    for check in outcome.failed_checks:
        click.echo(f"check {check.severity}: {check.asset}.{check.check}: {printable(check.description)}", err=True)
    if not outcome.success:
        raise UserError(f"pipeline run failed: {outcome.error}")
    click.echo(
        f"materialized {len(outcome.materialized)} assets in {time.monotonic() - t1:.0f} s "
        f"({outcome.cluster_days} cluster-day runs, then the fleet-day; runs {outcome.run_id})"
    )
    report = default_out_dir() / f"{day}.html"
    click.echo("")
    click.echo(f"report:    {printable(report) if report.exists() else '(not written: the report asset did not run)'}")
    click.echo(f"warehouse: {printable(warehouse_path(local_dir(data_dir)))}")  # S3: in the local work dir
    click.echo(f"web UI:    wattline ui --data-dir {printable(data_dir)}   (http://127.0.0.1:3000)")
    click.echo("try:")
    for query in EXAMPLE_QUERIES:
        click.echo(f'  wattline sql --data-dir {printable(data_dir)} "{query}"')
