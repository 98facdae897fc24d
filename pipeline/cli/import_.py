"""`wattline import`: a group of importers, one subcommand each (`nvidia-smi`, `prometheus`)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import click

from collectors.names import BadName, check_path_name
from collectors.printable import printable
from collectors.requests.timestamps import BadTimestamp, rfc3339_to_ns
from pipeline.cli.common import LINE_CHARS, UserError, data_dir_option, refresh_stale_catalog


@click.group("import")
def command() -> None:
    """Import power logs written by other tools into the `power` dataset."""


@command.command("nvidia-smi")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", required=True, help="Host the GPUs in these logs belong to (letters, digits, '.', '_', '-'; see docs/data-contract.md).")
@click.option("--tz", default=None, metavar="ZONE|±HH:MM",
              help="Zone of the logs' local timestamps (IANA name or UTC offset; default: this machine's zone).")
@click.option("--power-draw", type=click.Choice(["auto", "instant", "average"]), default="auto", show_default=True,
              help="What power.draw is: auto = average unless an instant column exists or the name column is GA100/pre-Ampere.")
@data_dir_option
def nvidia_smi(files: tuple[Path, ...], host: str, tz: str | None, power_draw: str, data_dir: Path) -> None:
    """Convert nvidia-smi --query-gpu CSV logs (csv or csv,nounits) to UTC power rows; bad lines are quarantined."""
    from collectors.nvidia_smi import ImportError_, import_files

    try:  # the host becomes the power/date=D/host=H folder: checked before anything is read
        check_path_name(host, "--host")
    except BadName as exc:
        raise UserError(str(exc)) from None
    inventory = _local_inventory(data_dir)  # a GPU whose uuid column it knows goes where it puts that UUID
    try:
        res = import_files(list(files), data_dir, host, tz=tz, power_draw=power_draw, inventory=inventory)
    except ImportError_ as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"import stopped: {exc}; re-running the same command is safe") from None
    click.echo(printable(res.summary(host), LINE_CHARS))
    refresh_stale_catalog(data_dir)


def _instant(value: str, flag: str) -> float:
    """RFC 3339 with an offset, a UTC date (its midnight), or Unix seconds → Unix seconds."""
    try:
        if value.replace(".", "", 1).isdigit():
            seconds = float(value)
            if not seconds < 1e15:  # beyond any date (an overflowing number of digits)
                raise UserError(f"{flag} {value!r}: not a time (expected Unix seconds)")
            return seconds
        return rfc3339_to_ns(value) / 1e9
    except BadTimestamp:
        pass
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise UserError(f"{flag} {value!r}: expected 2026-12-02T13:00:00Z, a date (UTC midnight) or Unix seconds") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def _seconds(value: str) -> float:
    """Prometheus-style durations: 1s, 500ms, 15s, 1m, or a plain number of seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", value.strip())
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"--step {value!r}: expected a duration such as 1s, 500ms, 15s or 1m")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


@command.command("prometheus")
@click.option("--url", required=True, metavar="http://HOST:9090", help="The Prometheus server that scrapes dcgm-exporter.")
@click.option("--start", required=True, metavar="TIME", help="Start (RFC 3339 with offset, a UTC date, or Unix seconds).")
@click.option("--end", required=True, metavar="TIME", help="End (same forms; inclusive).")
@click.option("--step", "step", default="1s", show_default=True,
              help="Sampling step of the imported rows (≤ 2 s keeps energy integrable; the scrape interval is the real resolution).")
@click.option("--metric", default="DCGM_FI_DEV_POWER_USAGE", show_default=True, help="Power gauge, in W.")
@click.option("--energy-metric", default="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", show_default=True,
              help="Energy counter in mJ (energy_j); '' to skip. Absent series leave energy_j null.")
@click.option("--limit-metric", default=None, metavar="METRIC",
              help="Enforced power limit gauge in W (power_limit_w), e.g. DCGM_FI_DEV_POWER_MGMT_LIMIT; "
                   "off unless given (dcgm-exporter exports it only when enabled in its counters CSV).")
@click.option("--host-label", default="Hostname", show_default=True, help="Label that names the host.")
@click.option("--gpu-label", default="gpu", show_default=True, help="Label that holds the GPU index.")
@click.option("--print-inventory", is_flag=True, help="Print a stub inventory.yaml from the labels seen; import nothing.")
@click.option("--allow-long-range", is_flag=True, help="Import a --start..--end longer than 31 days.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="SECONDS", help="Longest wait for one whole answer of Prometheus (connect, headers and body).")
@data_dir_option
def prometheus(url, start, end, step, metric, energy_metric, limit_metric, host_label, gpu_label, print_inventory, allow_long_range,
               timeout_s, data_dir) -> None:
    """Import dcgm-exporter power (and energy) series from Prometheus as `power` rows (source dcgm), and with
    the inventory's `kubernetes:` rules, who held each GPU when (from its pod labels) as `assignments`."""
    from collectors import assignments as asg
    from collectors.inventory import KUBERNETES_LABELS
    from collectors.prometheus import PrometheusError, assignment_rows, fetch, place_gpus, query_name, store_power, stub_inventory

    start_s, end_s = _instant(start, "--start"), _instant(end, "--end")
    step_s = _seconds(step)
    inventory, labels = None, ()
    if not print_inventory:
        inventory = _local_inventory(data_dir)
        if inventory is not None and inventory.kubernetes is not None and inventory.kubernetes.rules:
            labels = tuple(getattr(inventory.kubernetes.labels, k) for k in KUBERNETES_LABELS)
    try:
        if print_inventory:
            click.echo(stub_inventory(url, start_s, end_s, metric=metric, host_label=host_label, gpu_label=gpu_label,
                                      timeout_s=timeout_s), nl=False)
            return
        res = fetch(url, start_s, end_s, step_s=step_s, metric=metric, energy_metric=energy_metric or None,
                    host_label=host_label, gpu_label=gpu_label, timeout_s=timeout_s, allow_long_range=allow_long_range,
                    limit_metric=limit_metric or None, workload_labels=labels)
        place_gpus(res, inventory)  # power and assignments on the inventory's GPU where it knows the UUID
    except PrometheusError as exc:
        raise UserError(str(exc)) from None
    name = query_name(url, start_s, end_s, step_s, metric)
    held, bad, unmatched = [], [], {}
    if labels and inventory is not None:  # checked before anything is written
        rows, unmatched = assignment_rows(res, inventory)
        try:
            held, bad = asg.check_new_rows(data_dir, inventory, [dict(r, source="prometheus") for r in rows],
                                           leave_out=f"{name}.parquet")
        except asg.AssignmentConflict as exc:
            raise UserError(f"assignments disagree, nothing written: {printable(str(exc))}") from None
    store_power(res, data_dir, name)
    if labels:
        asg.write_assignments(data_dir, held, "prometheus", name=f"{name}.parquet")
        _quarantine_assignments(data_dir, name, bad)
    click.echo(printable(res.summary() + (_held_summary(held, bad, unmatched) if labels else ""), LINE_CHARS))
    refresh_stale_catalog(data_dir)
    if res.coarse_warning():
        click.echo(f"warning: {printable(res.coarse_warning())}", err=True)


def _held_summary(held: list[dict], bad: list, unmatched: dict) -> str:
    """What the pod labels said: the runs stored, those set aside, the pods no rule maps."""
    gpus = {(r["host"], r["gpu"]) for r in held}
    pods = sorted(unmatched, key=lambda p: -unmatched[p])
    return (f"; pod labels: {len(held)} assignment run(s) of {len(gpus)} GPU(s) stored"
            + (f", {len(bad)} set aside in quarantine/assignments/" if bad else "")
            + ("; pods no kubernetes rule maps (steps held by none): "
               + ", ".join(f"{p} ({unmatched[p]})" for p in pods[:5]) + (", ..." if len(pods) > 5 else "") if pods else ""))


def _assignment_rows(path: Path) -> list[dict]:
    """The file's rows as assignments columns (CSV: text, times in RFC 3339; Parquet: its types)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".parquet":
            table = pq.read_table(path)
        elif path.suffix.lower() == ".csv":
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in ("host", "gpu", "gpu_uuid", "kind", "name", "from_ts", "to_ts")},
                strings_can_be_null=True))
        else:
            raise UserError(f"{printable(str(path))}: expected a .csv or .parquet file")
    except UserError:
        raise
    except Exception as exc:  # pyarrow's several error types for a file it cannot read
        raise UserError(f"{printable(str(path))}: cannot be read ({printable(str(exc))})") from None
    missing = [c for c in ("kind", "name") if c not in table.column_names]
    if missing:
        raise UserError(f"{printable(str(path))}: missing column(s) {', '.join(missing)} (host, gpu or gpu_uuid, kind, name, from_ts, to_ts)")
    return table.to_pylist()


def _assignment_value(row: dict, key: str):
    """One cell as the contract's type; a ValueError says why it does not convert."""
    value = row.get(key)
    if value is None or value == "":
        return None
    if key == "gpu":
        number = int(value) if not isinstance(value, str) or value.strip().isdigit() else None
        if number is None or not 0 <= number <= 255:
            raise ValueError(f"gpu {value!r} is not a GPU index (0-255)")
        return number
    if key in ("from_ts", "to_ts"):
        if isinstance(value, str):
            try:
                value = dt.datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(f"{key} {value!r} is not an RFC 3339 time") from None
        if not isinstance(value, dt.datetime):
            raise ValueError(f"{key} {value!r} is not a time")
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)  # naive: read as UTC
    return str(value)


def _quarantine_assignments(data_dir, stem: str, bad: list[tuple[dict, str]]) -> None:
    """Set-aside assignment rows, each alone with its reason, as one file in quarantine/assignments/
    (one object on S3, or one file renamed into place: a reader never sees half of it)."""
    import json
    import uuid

    from collectors.contract import QUARANTINE_DIR
    from collectors.storage import DataRoot

    if not bad:
        return
    lines = [json.dumps({"row": {k: None if v is None else str(v) for k, v in row.items()}, "reason": why}) + "\n"
             for row, why in bad]
    DataRoot.open(data_dir).write_bytes(f"{QUARANTINE_DIR}/assignments/{stem}-{uuid.uuid4().hex[:12]}.jsonl",
                                        "".join(lines).encode())


def _local_inventory(data_dir):
    """The local data dir's inventory.yaml where there is one (None without), or a UserError."""
    from collectors.inventory import INVENTORY_FILE, InventoryError, load_inventory

    path = Path(data_dir) / INVENTORY_FILE
    if not path.is_file():
        return None
    try:
        return load_inventory(path)
    except InventoryError as exc:
        raise UserError(str(exc)) from None


def _root_inventory(root):
    """The data dir's inventory.yaml (a local folder or an ``s3://`` one), or a UserError."""
    import yaml

    from collectors.inventory import INVENTORY_FILE, InventoryError, load_inventory, parse_inventory

    try:
        if root.is_local:
            return load_inventory(root.location(INVENTORY_FILE))
        try:
            text = root.read_bytes(INVENTORY_FILE).decode()
        except FileNotFoundError:
            raise InventoryError(f"{root.location(INVENTORY_FILE)}: no inventory file (see docs/data-contract.md)") from None
        return parse_inventory(yaml.safe_load(text), root.location(INVENTORY_FILE), text)
    except (InventoryError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(" ".join(str(exc).split())) from None


@command.command("assignments")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@data_dir_option
def assignments(file: Path, data_dir: Path) -> None:
    """Which endpoint or job held which GPU when (CSV or Parquet: host, gpu or gpu_uuid, kind, name, from_ts, to_ts) → `assignments`."""
    from collectors import assignments as asg
    from collectors.storage import DataRoot

    root = DataRoot.open(data_dir)
    inventory = _root_inventory(root)
    rows, bad = [], []
    for raw in _assignment_rows(file):
        try:
            row = {k: _assignment_value(raw, k) for k in ("host", "gpu", "gpu_uuid", "kind", "name", "from_ts", "to_ts")}
        except ValueError as exc:
            bad.append(({k: None if v is None else str(v) for k, v in raw.items()}, str(exc)))
            continue
        if row["kind"] is None or row["name"] is None:
            bad.append(({k: None if v is None else str(v) for k, v in raw.items()}, "kind and name are required"))
            continue
        rows.append(dict(row, source="file"))
    try:
        good, refused = asg.check_new_rows(root, inventory, rows)
    except asg.AssignmentConflict as exc:
        raise UserError(f"assignments disagree, nothing written: {printable(str(exc))}") from None
    bad += refused
    try:
        asg.write_assignments(root, good, "file")
        _quarantine_assignments(root, file.stem, bad)
    except OSError as exc:
        raise UserError(f"import stopped: {exc}") from None
    click.echo(printable(f"{file.name}: {len(good)} assignment(s) stored, {len(bad)} set aside in quarantine/assignments/ "
                         "(naive times read as UTC)", LINE_CHARS))
    refresh_stale_catalog(data_dir)
