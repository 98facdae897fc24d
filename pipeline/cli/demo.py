"""`wattline demo`: simulated fleet → every asset → report, in one command (`make demo`)."""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from pathlib import Path

import click

from collectors.days import run_day_problem, today_utc
from collectors.inventory import InventoryError
from collectors.printable import printable
from collectors.settings import load
from pipeline.cli.common import UserError, data_dir_option, parse_date
from pipeline.constants import warehouse_path
from pipeline.remote import local_dir

EXAMPLE_QUERIES = (
    "select level, entity, round(max(power_pct), 1) as peak_pct from fleet_power_1s where level in ('role', 'cluster') group by all order by 1, 2",
    "select i.role, round(avg(p.mean_w)) as mean_w, round(max(p.max_w)) as max_w from power_1s p join inventory_gpus i using (host, gpu) group by all",
    "select endpoint, count(*) as requests, round(median(prompt_tokens)) as median_prompt, "
    "round(median(output_tokens)) as median_output from requests group by all order by 1",
)


START_S = 60.0
PER_GPU_DAY_S = 5.0
"""The rough cost of a demo on a 2-core machine (docs/benchmarks.md: about 5 s of wall time per
simulated GPU-day once the runs have started, about a minute of Dagster start-up and the fleet-day on a busy one);
the collector shape costs about 2.7 times as much per GPU-day."""
PROGRESS_EVERY_S = 15.0


def wattline_command() -> str:
    """How to call this wattline from the current folder: the venv's script by its path
    (``.venv/bin/wattline``), which need not be on the PATH."""
    script = Path(sys.executable).parent / "wattline"
    if not script.exists():
        return "wattline"
    try:
        relative = script.relative_to(Path.cwd())
    except ValueError:
        return str(script)
    return str(relative)


def _relative(data_dir) -> str:
    """The data dir as the user can paste it here: relative to the current folder when inside it."""
    if isinstance(data_dir, Path):
        try:
            return str(data_dir.relative_to(Path.cwd())) or "."
        except ValueError:
            pass
    return str(data_dir)


def estimate_s(gpus: int, hours: float | None, shape: str) -> float:
    gpu_days = gpus * (hours if hours is not None else 24.0) / 24.0
    return START_S + PER_GPU_DAY_S * gpu_days * (2.7 if shape == "collector" else 1.0)


def _rough(seconds: float) -> str:
    return f"~{seconds:.0f} s" if seconds < 90 else f"~{seconds / 60:.0f} min"


class Progress:
    """Says how far the pipeline is while ``run_day`` works (its runs are in worker processes):
    a line when a cluster-day or the fleet-day has written all its tables, and at most every
    ``PROGRESS_EVERY_S`` seconds how many table parts are written, from the parts on disk."""

    def __init__(self, data_dir: Path, day: str, clusters: list[str], cluster_tables: int, fleet_tables: int, echo):
        self.folder = data_dir / "derived"
        self.day, self.clusters, self.echo = day, clusters, echo
        self.expected = {**{c: cluster_tables for c in clusters}, "": fleet_tables}
        self.total = sum(self.expected.values())
        self.started = time.time()
        self.done: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="demo-progress", daemon=True)

    def written(self) -> dict[str, int]:
        """Parts of the day written since the run started, by cluster ('' for the fleet-day)."""
        counts: dict[str, int] = {}
        for part in self.folder.glob(f"*/date={self.day}/**/part-0.parquet"):
            try:
                if part.stat().st_mtime < self.started - 1:
                    continue
            except OSError:
                continue
            cluster = part.parent.name.removeprefix("cluster=") if part.parent.name.startswith("cluster=") else ""
            counts[cluster] = counts.get(cluster, 0) + 1
        return counts

    def _watch(self) -> None:
        last_line = time.monotonic()
        while not self.stop.wait(1.0):
            counts = self.written()
            for key, expected in self.expected.items():
                if key not in self.done and counts.get(key, 0) >= expected:
                    self.done.add(key)
                    name = f"cluster-day {key}" if key else "fleet-day"
                    n_clusters = len([k for k in self.done if k])
                    where = f" ({n_clusters}/{len(self.clusters)} cluster-days)" if key else ""
                    self.echo(f"  {time.time() - self.started:4.0f} s  {name}: {expected} tables written{where}")
                    last_line = time.monotonic()
            if time.monotonic() - last_line >= PROGRESS_EVERY_S:
                self.echo(f"  {time.time() - self.started:4.0f} s  {sum(counts.values())}/{self.total} table parts written")
                last_line = time.monotonic()

    def __enter__(self) -> Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


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
    from collectors.simulate.fleets import resolve_fleet
    from pipeline.definitions import defs
    from pipeline.jobs import keys_partitioned_by
    from pipeline.partitions import daily_partitions, day_cluster_partitions
    from pipeline.resources import reports_dir
    from pipeline.runner import day_clusters, run_day

    try:  # the run's settings, resolved once: the run and the report's path below use the same
        settings = load()
    except ValueError as exc:
        raise UserError(printable(str(exc))) from None
    today = today_utc()  # read once: the default day and its check agree across midnight
    day = parse_date(date) if date else (today - dt.timedelta(days=1)).isoformat()
    problem = run_day_problem(day, today)
    if problem:
        raise UserError(problem)
    try:
        gpus = sum(len(h.gpus) for _, _, h in resolve_fleet(fleet).iter_hosts())
    except InventoryError as exc:  # an unknown fleet name or a broken inventory file: one line
        raise UserError(printable(" ".join(str(exc).split()))) from None
    click.echo(
        f"wattline demo: {day}, fleet {printable(fleet)} ({gpus} GPUs{f', {hours:g} h' if hours is not None else ''}): "
        f"simulate, build every table, write the report; roughly {_rough(estimate_s(gpus, hours, shape))} on 2 cores"
    )
    t0 = time.monotonic()
    summary = simulate(data_dir, start=dt.date.fromisoformat(day), days=1, seed=seed, fleet=fleet, hours=hours, shape=shape)
    click.echo(f"1/3 {summary.line()} in {time.monotonic() - t0:.0f} s")
    t1 = time.monotonic()
    local = local_dir(data_dir)
    assets = list(defs.assets or [])
    clusters = day_clusters(local, day) if not str(data_dir).startswith("s3://") else []
    cluster_tables = len(keys_partitioned_by(assets, day_cluster_partitions))  # type: ignore[arg-type]
    fleet_tables = len([k for k in keys_partitioned_by(assets, daily_partitions) if k.path[-1] != "daily_report"])  # type: ignore[arg-type]
    click.echo(f"2/3 building every table: {len(clusters) or 'each'} cluster-day(s) of {cluster_tables} tables, "
               f"then the fleet-day's {fleet_tables} and the report")
    with Progress(local, day, clusters, cluster_tables, fleet_tables, lambda line: click.echo(line)):
        outcome = run_day(data_dir, day, settings=settings)  # cluster-days in parallel worker processes, then the fleet-day
    for check in outcome.failed_checks:
        click.echo(f"check {check.severity}: {check.asset}.{check.check}: {printable(check.description)}", err=True)
    if not outcome.success:
        raise UserError(f"pipeline run failed: {outcome.error}")
    click.echo(f"3/3 materialized {len(outcome.materialized)} assets in {time.monotonic() - t1:.0f} s; the report is one of them")
    report = reports_dir(settings) / f"{day}.html"
    wattline = wattline_command()
    where = f" --data-dir {printable(_relative(data_dir))}"
    click.echo("")
    click.echo(f"done in {time.monotonic() - t0:.0f} s. Open:")
    click.echo(f"  1. the report:  {printable(report) if report.exists() else '(not written: the report asset did not run)'}")
    click.echo(f"  2. the web UI:  {wattline} ui{where}   then http://127.0.0.1:3000")
    click.echo(f'  3. the tables:  {wattline} sql{where} "describe power_1s"   (every column\'s meaning: docs/columns.md)')
    click.echo(f"warehouse (DuckDB): {printable(warehouse_path(local))}")  # S3: in the local work dir
    click.echo("more queries:")
    for query in EXAMPLE_QUERIES:
        click.echo(f'  {wattline} sql{where} "{query}"')
