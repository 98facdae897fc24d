"""`wattline ingest requests`: request logs (JSONL, Azure traces, vLLM bench results) into the data dir."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from collectors.requests.ingest import FORMATS, Ingestor
from collectors.requests.lines import DEFAULT_MAX_LINE_BYTES
from pipeline.cli.common import UserError, data_dir_option, refresh_stale_catalog


@click.group("ingest")
def command() -> None:
    """Import logs and traces into the data dir."""


@command.command("requests")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True,
              help="jsonl: the canonical request log (docs/data-contract.md); azure: Azure LLM inference "
                   "traces; vllm-bench: serving-benchmark per-request results.")
@click.option("--follow", is_flag=True, help="Keep reading as the files grow, like tail -F (jsonl only).")
@click.option("--endpoint", default=None, help="Endpoint name for lines/files that carry none "
              "(azure default: the file name; vllm-bench default: the model in the file).")
@click.option("--max-line-bytes", type=click.IntRange(min=1024), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              help="Longer lines are quarantined as 'line too long' (a prefix is kept).")
@click.option("--flush-interval-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="--follow: seconds between atomic Parquet flushes.")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--follow: read-position file (default: under <data-dir>/state/; for an s3:// data dir "
                   "under $WATTLINE_STATE_DIR, else ~/.local/state/wattline/s3/...).")
@data_dir_option
def requests_command(paths, fmt, follow, endpoint, max_line_bytes, flush_interval_s, checkpoint_path, data_dir) -> None:
    """Ingest request logs from FILE or DIR (several allowed); prints ingested / quarantined / duplicates."""
    ingestor = Ingestor(data_dir, fmt, endpoint=endpoint, max_line_bytes=max_line_bytes)
    if follow:
        if fmt != "jsonl":
            raise UserError("--follow works with --format jsonl only (traces and bench results are complete files)")
        _follow(paths, ingestor, flush_interval_s, checkpoint_path)
    else:
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise UserError(f"no such file or directory: {', '.join(missing)}")
        try:
            ingestor.ingest(list(paths))
        except OSError as exc:
            raise UserError(f"writing to {data_dir} failed ({exc}); {ingestor.summary.line()} so far, "
                            "and re-running the same command is safe") from None
    summary = ingestor.summary
    for error in summary.errors:
        click.echo(f"warning: {error}", err=True)
    click.echo(summary.line())
    refresh_stale_catalog(data_dir)
    if summary.files_read == 0:
        raise UserError("nothing could be read" + (f": {summary.errors[0]}" if summary.errors else ": no matching files"))


def _follow(paths, ingestor: Ingestor, flush_interval_s: float, checkpoint_path: Path | None) -> None:
    from collectors.requests.tail import Follower

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    follower = Follower(list(paths), ingestor, checkpoint_path=checkpoint_path, flush_interval_s=flush_interval_s)
    click.echo(f"following {len(paths)} path(s); checkpoint {follower.checkpoint_path}; Ctrl-C to stop", err=True)
    follower.run(stop)
    ingestor.summary.files_read = max(ingestor.summary.files_read, follower.files_seen)
