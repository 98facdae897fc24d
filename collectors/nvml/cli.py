"""`wattline collect`: the click command, importable without the pipeline (so `python -m collectors.nvml`
runs on a GPU host that has only pyarrow, click and pynvml)."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys

import click

from collectors.names import BadName, check_path_name
from collectors.nvml.nvml_source import NVML_MODULE_ENV, NvmlUnavailable
from collectors.printable import printable
from collectors.settings import DATA_DIR_ENV
from collectors.storage import resolve_data_root


class CollectError(click.ClickException):
    """One line on stderr, exit code 2 (same shape as pipeline.cli.common.UserError)."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {printable(self.format_message())}", err=True)


def parse_seconds(value: str | float) -> float:
    """'100ms', '0.1s', '2', '1m' → seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", str(value))
    if not m:
        raise CollectError(f"bad duration {value!r}: expected e.g. 100ms, 0.5s, 2")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


def host_name(value: str | None) -> str:
    """``--host``, else this machine's short hostname; either must follow the path-name rule
    (collectors/names.py), since it becomes the ``host=H`` folder of every file written."""
    if value is not None:
        where = "--host"
    else:
        value, where = socket.gethostname().split(".")[0], "this machine's hostname (pass --host NAME to use another)"
    try:
        return check_path_name(value, where)
    except BadName as exc:
        raise CollectError(str(exc)) from None


def parse_gpus(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        return sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError:
        raise CollectError(f"bad --gpus {value!r}: expected indices like 0,1,3") from None


def parse_listen(value: str, allow_remote: bool) -> tuple[str, int]:
    """'127.0.0.1:9401' or '[::1]:9401' → (address, port); a non-loopback address needs --allow-remote."""
    from collectors.names import remote_listen_problem, remote_listen_warning

    m = re.fullmatch(r"\[?([^\[\]]*?)\]?:(\d{1,5})", value.strip())
    if not m or not m.group(1) or not 0 < int(m.group(2)) < 65536:
        raise CollectError(f"bad --metrics-listen {value!r}: expected ADDRESS:PORT, e.g. 127.0.0.1:9401")
    addr, port = m.group(1), int(m.group(2))
    problem = remote_listen_problem(addr, allow_remote, "the metrics endpoint")
    if problem:
        raise CollectError(problem)
    warning = remote_listen_warning(addr, "the metrics endpoint")
    if warning:
        click.echo(warning, err=True)
    return addr, port


def load_live_config(alerts_file: str | None, inventory_file: str | None, host: str):
    """(AlertsFile or None, HostInfo or None), every problem as one CollectError line."""
    from collectors.inventory import InventoryError, load_inventory
    from collectors.nvml.alerts import NEEDS_PROVISIONED, AlertsError, load_alerts
    from collectors.nvml.metrics import HostInfo

    try:
        rules = load_alerts(alerts_file) if alerts_file else None
    except AlertsError as exc:
        raise CollectError(str(exc)) from None
    info = None
    if inventory_file:
        try:
            inv = load_inventory(inventory_file)
        except InventoryError as exc:
            raise CollectError(str(exc)) from None
        found = [h for _, _, h in inv.iter_hosts() if h.name == host]
        if not found:
            raise CollectError(f"{inventory_file}: no host named {host!r} (the collector's --host); "
                               "its labels, TDP and provisioned power come from there")
        rows = [r for r in inv.gpu_rows() if r["host"] == host]
        info = HostInfo(role=found[0].role, provisioned_w=found[0].effective_provisioned_w,
                        gpu_tdp_w={r["gpu"]: r["tdp_w"] for r in rows},
                        gpu_endpoint={r["gpu"]: r["endpoint"] for r in rows if r["endpoint"]},
                        gpu_job={r["gpu"]: r["job"] for r in rows if r["job"]})
    if rules is not None and info is None:
        need = [r.name for r in rules.rules if r.level == "host" and r.quantity in NEEDS_PROVISIONED]
        if need:
            raise CollectError(f"{alerts_file}: rule {need[0]!r} needs the host's provisioned power: "
                               "pass --inventory FILE that lists this host")
    return rules, info


@click.command("collect")
@click.option("--interval", default="100ms", show_default=True, help="Tick for instant + 1 s average power.")
@click.option("--buffer/--no-buffer", default=True, show_default=True, help="Drain the driver's ~20 ms power buffer.")
@click.option("--buffer-seconds", default="1s", show_default=True, help="Buffer drain period (the buffer holds ~2.4 s).")
@click.option("--gpus", default=None, help="GPU indices, e.g. 0,1 (default: all).")
@click.option("--flush-seconds", default="10s", show_default=True, help="Write a Parquet file this often.")
@click.option("--slow-seconds", default="1s", show_default=True, help="Clock, utilisation, memory, temperature, power limit.")
@click.option("--energy-seconds", default="30s", show_default=True, help="Energy counter period (~4 ms CPU per read).")
@click.option("--status-seconds", default="60s", show_default=True, help="Log a counters line this often.")
@click.option("--host", default=None, help="Host name in the rows (default: this machine's short hostname).")
@click.option("--max-pending-rows", default=1_000_000, show_default=True, help="Rows kept in memory while writes fail.")
@click.option("--compact/--no-compact", default=True, show_default=True, help="Merge closed hours' files while running.")
@click.option("--compact-only", is_flag=True, help="Compact closed hours of the data dir (all hosts, or --host) and exit.")
@click.option("--data-dir", "data_dir", envvar=DATA_DIR_ENV, default="data", show_default=True,
              help=f"Data directory, or s3://bucket/prefix (env {DATA_DIR_ENV}; S3 settings: docs/storage.md).")
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@click.option("--metrics-listen", default=None, metavar="ADDR:PORT",
              help="Serve live per-GPU and per-host power, swings and alert counters for Prometheus, e.g. 127.0.0.1:9401.")
@click.option("--allow-remote", is_flag=True, help="Allow --metrics-listen on a non-loopback address (no authentication).")
@click.option("--inventory", "inventory_file", default=None, type=click.Path(dir_okay=False),
              help="Inventory YAML: role, endpoint and training_job labels, TDP and provisioned power for this --host.")
@click.option("--alerts", "alerts_file", default=None, type=click.Path(dir_okay=False),
              help="Alert rules YAML (docs/collector.md): log line, counter and optional webhook within 2 s.")
@click.option("--nvml-module", default=None, hidden=True, help=f"NVML binding to import (env {NVML_MODULE_ENV}); tests use a fake.")
@click.option("--duration-seconds", default=None, hidden=True, help="Stop after this long (benchmarks, tests).")
def command(interval, buffer, buffer_seconds, gpus, flush_seconds, slow_seconds, energy_seconds, status_seconds,
            host, max_pending_rows, compact, compact_only, data_dir, log_level, metrics_listen, allow_remote,
            inventory_file, alerts_file, nvml_module, duration_seconds) -> None:
    """Sample GPU power through NVML into the `power` dataset until SIGTERM/SIGINT."""
    logging.basicConfig(level=log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    data_dir = resolve_data_root(data_dir)  # an absolute Path, or an s3:// URL kept as it is
    if compact_only:
        from collectors.nvml.compact import compact_power

        res = compact_power(data_dir, host_name(host) if host is not None else None)
        click.echo(f"compacted {res.hours} hour(s): {res.files_in} files → {len(res.paths)} "
                   f"({res.rows} rows; {res.rolled_forward} leftover sources of interrupted merges removed)")
        return
    from collectors.nvml.daemon import CollectorConfig, run_collector
    from collectors.nvml.gpu_sampler import SamplingConfig

    interval_s = parse_seconds(interval)
    buffer_s = parse_seconds(buffer_seconds)
    if not 0.005 <= interval_s <= 60:
        raise CollectError(f"--interval {interval} is out of range (5ms..60s)")
    if buffer and not 0.05 <= buffer_s <= 2.0:
        raise CollectError("--buffer-seconds must be between 50ms and 2s: the driver buffer holds only ~2.4 s")
    sampling = SamplingConfig(interval_s=interval_s, slow_s=parse_seconds(slow_seconds),
                              energy_s=parse_seconds(energy_seconds), buffer=buffer, buffer_s=buffer_s)
    cfg = CollectorConfig(data_dir=data_dir, gpus=parse_gpus(gpus), sampling=sampling,
                          flush_s=parse_seconds(flush_seconds), status_s=parse_seconds(status_seconds),
                          compact=compact, max_pending_rows=max_pending_rows, nvml_module=nvml_module,
                          duration_s=parse_seconds(duration_seconds) if duration_seconds else None)
    cfg.host = host_name(host)
    cfg.metrics_listen = parse_listen(metrics_listen, allow_remote) if metrics_listen else None
    if alerts_file or inventory_file:
        cfg.alerts, cfg.host_info = load_live_config(alerts_file, inventory_file, cfg.host)
    from collectors.nvml.daemon import StartError

    try:
        code = run_collector(cfg)
    except (NvmlUnavailable, StartError) as exc:
        raise CollectError(str(exc)) from None
    sys.exit(code)


def main() -> None:
    command(prog_name=os.environ.get("WATTLINE_PROG", "wattline collect"))
