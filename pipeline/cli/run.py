"""`wattline run --date D`: materialize every asset of one day's partition through Dagster."""

from __future__ import annotations

import time
from dataclasses import replace

import click

from collectors.contract import DATASETS
from collectors.days import run_day_problem
from collectors.inventory import InventoryError
from collectors.printable import printable
from collectors.settings import GRID_STEP_MS_ENV, load
from pipeline import remote
from pipeline.cli.common import UserError, data_dir_option, date_option
from pipeline.datadir import link_reason, linked_paths, load_inventory_if_any


def require_day_data(data_dir, date: str) -> None:
    root = remote.open_root(data_dir)  # a local folder or an s3:// prefix: listed through the root
    if root.is_local and not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist (run `wattline simulate` or point --data-dir at your data)")
    day_glob = lambda name: DATASETS[name].glob().replace("date=*", f"date={date}", 1)  # noqa: E731
    if not any(root.list(day_glob(name)) for name in ("power", "requests", "job_events")):
        links = [str(link) for name in DATASETS for link in (linked_paths(data_dir, name, date) if root.is_local else {})]
        beside = f" (symbolic links are not read: {', '.join(links[:3])})" if links else ""
        raise UserError(f"no power, requests or job_events Parquet for {date} under {data_dir}{beside}")
    local = remote.work_dir(root)
    remote.stage(root, local)  # inventory.yaml, for an S3 data dir
    try:  # every asset needs it: say what is wrong before a run fails on it
        load_inventory_if_any(local)
    except InventoryError as exc:
        raise UserError(" ".join(str(exc).split())) from None


@click.command("run")
@date_option
@click.option("--select", default=None, metavar="ASSET[,ASSET...]", help="Only these assets (default: all).")
@click.option("--timings", is_flag=True, help="Print each asset's wall time (summed over the cluster-days) and the process's peak RSS while it ran.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Cluster-days built at once, each in its own process (env WATTLINE_WORKERS; "
         "default: one per core, at most one per cluster and one per 2 GiB of the default memory bound).",
)
@click.option("--cap-factors", default=None, metavar="F[,F...]",
              help="power_cap_whatif's candidate caps, fractions of each GPU's enforced limit in (0, 1] "
                   "(env WATTLINE_CAP_FACTORS; default 1.0,0.9,0.8,0.7,0.6).")
@click.option("--cap-alpha", default=None, metavar="MODEL=A[:LOW:HIGH],...",
              help="power_cap_whatif's α per GPU model, overriding the built-in ones, e.g. H100=0.3:0.2:0.45 "
                   "(env WATTLINE_CAP_ALPHA; MODEL matched, ignoring case, inside the inventory's GPU model).")
@data_dir_option
def command(date: str, select: str | None, timings: bool, workers: int | None, cap_factors: str | None,
            cap_alpha: str | None, data_dir) -> None:
    """Materialize the day: every cluster-day (in parallel worker processes), then the fleet-day
    rollups and the report (the same jobs the UI and schedule run). Host-and-above swings use the
    grid of WATTLINE_GRID_STEP_MS (ms, a divisor of 1000 from 10 to 1000; default 100)."""
    from pipeline.power_caps import cap_variables
    from pipeline.runner import run_day

    problem = run_day_problem(date)
    if problem:
        raise UserError(problem)
    try:  # the run's settings, resolved once here; a bad one is said here, not as a failed asset in a worker
        settings = load()
        # a flag takes the place of its setting for this run (the workers get them as an argument)
        settings = replace(settings, cap_factors=settings.cap_factors if cap_factors is None else cap_factors,
                           cap_alpha=settings.cap_alpha if cap_alpha is None else cap_alpha)
        cap_variables(settings.cap_factors, settings.cap_alpha)
    except ValueError as exc:
        raise UserError(printable(str(exc))) from None
    selection = _selection(select)
    require_day_data(data_dir, date)
    started = time.monotonic()
    outcome = run_day(data_dir, date, selection=selection, workers=workers, settings=settings)
    seconds = time.monotonic() - started
    for entry in outcome.quarantined:
        click.echo(f"quarantined {entry['dataset']} file {printable(entry['path'])}: {printable(entry['reason'])} "
                   f"(now {printable(entry['quarantined_path'])})", err=True)
    for entry in outcome.converted:
        click.echo(f"converted {entry['dataset']} file {printable(entry['path'])}: {printable(entry['reason'])} "
                   f"(original kept as {printable(entry['quarantined_path'])})", err=True)
    for entry in outcome.links:
        click.echo(f"link {entry['dataset']} {printable(entry['path'])}: {printable(link_reason(entry['target']))}", err=True)
    for check in outcome.failed_checks:
        click.echo(f"check {check.severity}: {check.asset}.{check.check}: {printable(check.description)}".rstrip(": "), err=True)
    if not outcome.success:
        click.echo(f"run {outcome.run_id} failed after {seconds:.1f} s: {printable(outcome.error)}", err=True)
        raise SystemExit(1)
    if timings:
        for step, step_s in sorted(outcome.step_seconds.items(), key=lambda kv: -kv[1]):
            peak = outcome.step_peak_rss_mb.get(step)
            click.echo(f"  {step:<32} {step_s:8.2f} s" + (f" {peak:8.0f} MB peak RSS" if peak is not None else ""))
    status = "ok" if outcome.ok else "finished with failed ERROR checks"
    click.echo(
        f"{date}: {len(outcome.materialized)} assets materialized in {seconds:.1f} s "
        f"({_runs(outcome)}), {len(outcome.failed_checks)} failed check(s): {status} (runs {outcome.run_id}); "
        f"host-and-above swings on a {settings.grid_step_ms} ms grid ({GRID_STEP_MS_ENV})"
    )
    if not outcome.ok:
        raise SystemExit(1)


def _selection(select: str | None) -> list[str] | None:
    """``--select`` as a list, every name known (else nothing would run and the day would look ok)."""
    if not select:
        return None
    from pipeline.runner import asset_names

    names = [s.strip() for s in select.split(",") if s.strip()]
    known = asset_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UserError(f"unknown asset(s) {', '.join(unknown) or repr(select)}; known: {', '.join(known)}")
    return names


def _runs(outcome) -> str:
    fleet = " + the fleet-day" if outcome.fleet_day_ran else ""
    return f"{outcome.cluster_days} cluster-day run(s){fleet}"
