"""`wattline ingest requests`: request logs (JSONL, Azure traces, vLLM bench results, OTLP JSON lines) into the
data dir; `wattline ingest otlp`: an OTLP/HTTP receiver for vLLM's traces."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click
import yaml

from collectors.inventory import InventoryError
from collectors.printable import printable
from collectors.requests.ingestor import FORMATS, Ingestor, UnknownEndpoint
from collectors.requests.jsonl import DEFAULT_MAX_DEPTH
from collectors.requests.lines import DEFAULT_MAX_LINE_BYTES
from collectors.requests.otlp_receiver import Limits
from collectors.requests.vllm_bench import NoEndpoint
from pipeline.cli.common import LINE_CHARS, UserError, data_dir_option, refresh_stale_catalog


@click.group("ingest")
def command() -> None:
    """Import logs and traces into the data dir."""


@command.command("requests")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True,
              help="jsonl: the canonical request log (docs/data-contract.md); azure: Azure LLM inference "
                   "traces; vllm-bench: serving-benchmark per-request results; otlp: OpenTelemetry JSON lines "
                   "(the Collector's file exporter) of vLLM llm_request spans (docs/connect.md).")
@click.option("--follow", is_flag=True, help="Keep reading as the files grow, like tail -F (jsonl only).")
@click.option("--endpoint", default=None, help="Endpoint name for lines/files that carry none "
              "(azure: required; vllm-bench default: the model in the file; otlp: every span's); "
              "it must be an endpoint of inventory.yaml.")
@click.option("--endpoint-from", default=None, metavar="ATTR",
              help="otlp: take each span's endpoint from this resource attribute (e.g. service.name).")
@click.option("--max-line-bytes", type=click.IntRange(min=1024), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              help="Longer lines are quarantined as 'line too long' (a prefix is kept).")
@click.option("--max-depth", type=click.IntRange(min=1, max=512), default=DEFAULT_MAX_DEPTH, show_default=True,
              help="jsonl: lines nested deeper ([ and { levels) are quarantined as 'nested too deep'.")
@click.option("--flush-interval-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="--follow: seconds between atomic Parquet flushes.")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="--follow: read-position file (default: under <data-dir>/state/; for an s3:// data dir "
                   "under $WATTLINE_STATE_DIR, else ~/.local/state/wattline/s3/...).")
@click.option("--allow-unknown-endpoint", is_flag=True,
              help="Store requests of endpoints inventory.yaml does not list (or without an inventory); "
                   "otherwise a bulk import stops with an error and --follow quarantines them.")
@data_dir_option
def requests_command(paths, fmt, follow, endpoint, endpoint_from, max_line_bytes, max_depth, flush_interval_s,
                     checkpoint_path, allow_unknown_endpoint, data_dir) -> None:
    """Ingest request logs from FILE or DIR (several allowed); prints ingested / quarantined / duplicates."""
    odd = [str(p) for p in paths if p.exists() and not (p.is_file() or p.is_dir())]
    if odd:  # /dev/zero, a pipe, a socket: endless or read once, never a log file to import or follow
        raise UserError(f"not a regular file or folder: {', '.join(odd)} (copy the log to a file first)")
    if fmt == "otlp":
        _check_endpoint_choice(endpoint, endpoint_from)
    elif endpoint_from is not None:
        raise UserError("--endpoint-from works with --format otlp only")
    if follow and fmt != "jsonl":
        raise UserError("--follow works with --format jsonl only (traces and bench results are complete files)")
    policy = "allow" if allow_unknown_endpoint else "quarantine" if follow else "refuse"
    ingestor = _ingestor(data_dir, fmt, endpoint=endpoint, endpoint_from=endpoint_from, max_line_bytes=max_line_bytes,
                         max_depth=max_depth, unknown_endpoint=policy)
    if follow:
        _follow(paths, ingestor, flush_interval_s, checkpoint_path)
    else:
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise UserError(f"no such file or directory: {', '.join(missing)}")
        try:
            ingestor.ingest(list(paths))
        except (UnknownEndpoint, NoEndpoint) as exc:
            stored = ingestor.summary.ingested + ingestor.summary.quarantined
            raise UserError(f"{exc}" + (f"; {ingestor.summary.line()} before that (re-running adds only the rest)"
                                        if stored else "; nothing written")) from None
        except OSError as exc:
            raise UserError(f"writing to {data_dir} failed ({exc}); {ingestor.summary.line()} so far, "
                            "and re-running the same command is safe") from None
    summary = ingestor.summary
    for error in summary.errors:
        click.echo(f"warning: {printable(error)}", err=True)
    click.echo(printable(summary.line(), LINE_CHARS))
    refresh_stale_catalog(data_dir)
    if summary.files_read == 0:
        raise UserError("nothing could be read" + (f": {summary.errors[0]}" if summary.errors else ": no matching files"))


def _check_endpoint_choice(endpoint: str | None, endpoint_from: str | None) -> None:
    if (endpoint is None) == (endpoint_from is None):
        raise UserError("name the endpoint: --endpoint NAME (one per receiver or file set) or --endpoint-from ATTR "
                        "(a resource attribute each vLLM server sets, e.g. via OTEL_SERVICE_NAME); vLLM's default "
                        "service.name does not tell servers apart")


def _ingestor(data_dir, fmt: str, **kw) -> Ingestor:
    try:
        return Ingestor(data_dir, fmt, **kw)
    except (InventoryError, yaml.YAMLError) as exc:
        raise UserError(f"inventory.yaml: {str(exc).splitlines()[0]}") from None
    except (UnknownEndpoint, NoEndpoint) as exc:
        raise UserError(str(exc)) from None


_LIMITS = Limits()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:4318")
    return host.strip("[]"), int(port)


@command.command("otlp")
@click.option("--listen", default="127.0.0.1:4318", show_default=True, metavar="HOST:PORT",
              help="Address to serve OTLP/HTTP on (POST /v1/traces); a non-loopback one needs --allow-remote.")
@click.option("--endpoint", default=None, help="Endpoint name of every span received (one receiver per endpoint).")
@click.option("--endpoint-from", default=None, metavar="ATTR",
              help="Take each span's endpoint from this resource attribute (e.g. service.name, set by "
                   "OTEL_SERVICE_NAME on each vLLM server).")
@click.option("--flush-interval-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between atomic Parquet flushes (a crash loses at most this much).")
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback --listen address (anyone who reaches it can write requests).")
@click.option("--allow-unknown-endpoint", is_flag=True,
              help="Store spans of endpoints inventory.yaml does not list (otherwise they are rejected and quarantined).")
@click.option("--max-body-bytes", type=click.IntRange(min=1024), default=_LIMITS.max_body_bytes, show_default=True,
              help="Largest body, before and after gzip (larger: 413).")
@click.option("--max-inflight-bytes", type=click.IntRange(min=1024), default=_LIMITS.max_inflight_bytes,
              show_default=True, help="Bytes of bodies held at once, received and inflated (more: 503 Retry-After).")
@click.option("--max-decoding", type=click.IntRange(min=1, max=64), default=_LIMITS.max_decoding, show_default=True,
              help="Bodies decoded at once (more wait, then 503 Retry-After).")
@click.option("--max-connections", type=click.IntRange(min=1, max=4096), default=_LIMITS.max_connections,
              show_default=True, help="Connections served at once (one thread each).")
@click.option("--request-timeout-s", type=click.FloatRange(min=0.5), default=_LIMITS.request_timeout_s,
              show_default=True, help="Seconds a client has to send a whole request; also its idle time between requests.")
@data_dir_option
def otlp_command(listen, endpoint, endpoint_from, flush_interval_s, allow_remote, allow_unknown_endpoint, max_body_bytes,
                 max_inflight_bytes, max_decoding, max_connections, request_timeout_s, data_dir) -> None:
    """Receive vLLM's OpenTelemetry traces (llm_request spans) as request rows, until Ctrl-C."""
    from collectors.names import remote_listen_problem, remote_listen_warning
    from collectors.requests.otlp_receiver import TRACES_PATH, Receiver, serve

    limits = Limits(max_body_bytes=max_body_bytes, max_inflight_bytes=max_inflight_bytes, max_decoding=max_decoding,
                    max_connections=max_connections, request_timeout_s=request_timeout_s)
    if limits.problem():
        raise UserError(f"--max-inflight-bytes {max_inflight_bytes}: {limits.problem()} (--max-body-bytes)")
    host, port = parse_listen(listen)
    problem = remote_listen_problem(host, allow_remote, "the OTLP receiver")
    if problem:
        raise UserError(problem)
    _check_endpoint_choice(endpoint, endpoint_from)
    ingestor = _ingestor(data_dir, "otlp", endpoint=endpoint, endpoint_from=endpoint_from,
                         unknown_endpoint="allow" if allow_unknown_endpoint else "quarantine")
    receiver = Receiver(ingestor, endpoint=endpoint, endpoint_from=endpoint_from, flush_interval_s=flush_interval_s,
                        source=f"otlp-http://{listen}", limits=limits)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    warning = remote_listen_warning(host, "the OTLP receiver")
    if warning:
        click.echo(printable(warning), err=True)

    def ready(address):
        shown = f"[{address[0]}]" if ":" in address[0] else address[0]
        click.echo(f"listening on http://{shown}:{address[1]}{TRACES_PATH}; flushing every {flush_interval_s:g} s "
                   f"to {printable(data_dir)}; Ctrl-C to stop", err=True)

    try:
        serve(receiver, host, port, stop, ready=ready)
    except OSError as exc:
        if not receiver.exports:
            raise UserError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        raise UserError(f"writing to {data_dir} failed ({exc}); {ingestor.summary.line('OTLP')}") from None
    refused = [(receiver.bad_bodies, "malformed"), (receiver.too_large, "too large"),
               (receiver.busy, "answered busy (503)"), (receiver.disconnects, "client(s) gone early")]
    click.echo(printable(ingestor.summary.line(f"{receiver.exports} OTLP export(s)"
                                               + "".join(f", {n} {what}" for n, what in refused if n)), LINE_CHARS))


def _follow(paths, ingestor: Ingestor, flush_interval_s: float, checkpoint_path: Path | None) -> None:
    from collectors.requests.tail import Follower

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    follower = Follower(list(paths), ingestor, checkpoint_path=checkpoint_path, flush_interval_s=flush_interval_s)
    click.echo(f"following {len(paths)} path(s); checkpoint {printable(follower.checkpoint_path)}; Ctrl-C to stop", err=True)
    follower.run(stop)
    ingestor.summary.files_read = max(ingestor.summary.files_read, follower.files_seen)
