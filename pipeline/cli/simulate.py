"""`wattline simulate`: write a simulated fleet's power, requests and training events into the data dir."""

from __future__ import annotations

import datetime as dt

import click

from collectors.days import today_utc, write_day_problem
from collectors.printable import printable
from collectors.requests.replay import load_replay_arrivals, replay_arrivals_option
from pipeline.cli.common import UserError, data_dir_option, parse_date, refresh_stale_catalog


@click.command("simulate")
@click.option("--days", type=click.IntRange(min=1), default=1, show_default=True, help="Days to simulate.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Same seed, same bytes.")
@click.option("--start", metavar="YYYY-MM-DD", default=None, help="First day (UTC)  [default: yesterday]")
@click.option("--fleet", default="demo", show_default=True, metavar="demo|tiny|FILE", help="Built-in fleet or an inventory YAML.")
@click.option("--hours", type=float, default=None, help="Simulate only the first H hours of each day.")
@click.option("--shape", type=click.Choice(["simple", "collector"]), default="simple", show_default=True,
              help="simple: one 10 Hz series per GPU; collector: what `wattline collect` writes (~50 Hz driver buffer + 10 Hz fields, ~6x the rows).")
@replay_arrivals_option
@data_dir_option
def command(days: int, seed: int, start: str | None, fleet: str, hours: float | None, shape: str, replay_arrivals, data_dir) -> None:
    """Simulate a GPU fleet (training and inference), no GPU needed."""
    from collectors.inventory import InventoryError
    from collectors.simulate import simulate
    from collectors.simulate.fleets import resolve_fleet

    today = today_utc()  # read once: the default start and the range check agree across midnight
    first = dt.date.fromisoformat(parse_date(start)) if start else today - dt.timedelta(days=1)
    if hours is not None and not 0 < hours <= 24:
        raise UserError(f"--hours must be in (0, 24], got {hours}")
    problem = write_day_problem(first, today) or write_day_problem(first + dt.timedelta(days=days - 1), today)
    if problem:
        raise UserError(f"--start {first} --days {days}: {problem}")
    try:
        arrivals = None
        if replay_arrivals:
            endpoints = [e.name for _, _, host in resolve_fleet(fleet).iter_hosts() for e in host.endpoints]
            kind, trace = replay_arrivals
            arrivals = load_replay_arrivals(kind, trace, sorted(set(endpoints)))
        summary = simulate(data_dir, start=first, days=days, seed=seed, fleet=fleet, hours=hours, arrivals=arrivals, shape=shape)
    except InventoryError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:  # the data dir became unwritable or full midway
        raise UserError(f"writing to {data_dir} failed ({exc}); inventory.yaml was left as it was, "
                        "and re-running the same command is safe") from None
    click.echo(f"{summary.line()} → {printable(data_dir)}")
    refresh_stale_catalog(data_dir)
