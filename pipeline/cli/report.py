"""`wattline report --date D [--out DIR]`: the day's report from the warehouse tables."""

from __future__ import annotations

from pathlib import Path

import click

from collectors.printable import printable
from collectors.settings import load
from pipeline import readonly, warehouse
from pipeline.cli.common import UserError, data_dir_option, date_option
from pipeline.readonly import ReadOnlyError, connect_readonly
from pipeline.warehouse import reader_dir


class SectionsFailed(click.ClickException):
    """A section failed for another reason than "table not built yet": exit 1, one line."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"error: {printable(self.format_message())}", err=True)


@click.command("report")
@date_option
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: $WATTLINE_REPORTS_DIR, else reports/out).")
@click.option("--no-png", is_flag=True, help="Skip the PNG per chart (the HTML and JSON are still written).")
@data_dir_option(access="read")
def command(date: str, out: Path | None, no_png: bool, data_dir: Path) -> None:
    """Write D.html (self-contained, opens offline), a PNG per chart and D.json (headline numbers).

    Reads only warehouse tables (read-only), so it is safe while a run is writing. Sections
    whose table has not been built yet say "not available yet"; a section that fails for any
    other reason is named on stderr (one line each) and the command exits 1.
    """
    from pipeline.resources import reports_dir
    from reports.daily import build_report

    data_dir = reader_dir(data_dir, date)  # S3: a local mirror of derived/ and the quarantine
    if not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist (run `wattline simulate` or pass --data-dir)")
    if not warehouse.has_data(data_dir) and not warehouse.derived_tables(data_dir):
        raise UserError(f"data dir {data_dir} has no Parquet data yet (run `wattline simulate`, `collect` or `ingest`)")
    if not any(
        (data_dir / "derived" / table / f"date={date}").is_dir() for table in warehouse.derived_tables(data_dir)
    ):
        click.echo(f"note: no derived tables for {date} yet: run `wattline run --date {date} --data-dir {printable(data_dir)}` first", err=True)
    settings = load()
    readonly.set_limits(settings.duckdb_memory, settings.duckdb_threads)
    try:  # the catalog must open (a broken inventory.yaml is one line, not an empty report)
        connect_readonly(data_dir).close()
    except ReadOnlyError as exc:
        raise UserError(str(exc)) from None
    report = build_report(data_dir, date, out or reports_dir(settings), png=not no_png)
    failed = [s for s in report.sections if s.error]
    for s in failed:
        click.echo(f"section {s.key} failed: {printable(' '.join(s.error.split()))}", err=True)
    partial = [s.key for s in report.sections if s.missing]
    size = report.html_path.stat().st_size
    click.echo(f"report:  {printable(report.html_path)} ({size / 1e6:.2f} MB, {len(report.points)} charts, "
               f"max {max(report.points.values(), default=0)} points per chart)")
    click.echo(f"numbers: {printable(report.json_path)}")
    if report.pngs:
        click.echo(f"charts:  {printable(report.pngs[0].parent)}/ ({len(report.pngs)} PNG)")
    if partial:
        click.echo(f"partial sections (tables not available yet): {', '.join(partial)}")
    if failed:
        raise SectionsFailed(f"{len(failed)} report section(s) failed: {', '.join(s.key for s in failed)} "
                             "(not a table that is not built yet: see the lines above; the HTML marks them)")
