"""Import nvidia-smi CSV logs (`--query-gpu=... --format=csv[,nounits]`) into the `power` dataset.

Three things make these logs easy to get wrong, and each is explicit here:

* **Time zone.** nvidia-smi writes local wall-clock time with no zone. ``tz`` (an IANA zone or a
  ±HH:MM offset; default: this machine's zone) converts it to UTC, and the summary prints the zone
  used, because a wrong zone silently shifts power against request logs by hours.
* **What `power.draw` means.** On Ampere and newer GPUs except GA100 (A100/A30), `power.draw` is a
  1 s average; on GA100 and older GPUs it is instantaneous. Rule (``power_draw="auto"``): an
  explicit `power.draw.instant` column is the instant power and `power.draw` (or
  `power.draw.average`) the average; without an instant column, `power.draw` is instantaneous only
  when a `name` column shows a GA100 or pre-Ampere part, otherwise it is recorded as
  ``power_avg_w`` with source ``nvidia-smi-average``. ``power_draw="instant"|"average"`` overrides.
* **Bad lines** (wrong field count, bad timestamp or number, no power reading, duplicates, bytes
  that are not UTF-8) are quarantined with the raw line, file, line number and reason, and counted.

Output files are named from the input's content hash, so importing the same file twice replaces
its rows instead of duplicating them.
"""

from __future__ import annotations

import codecs
import datetime as dt
import hashlib
import io
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa

from collectors.contract import POWER, TS
from collectors.days import writable_range, write_day_problem
from collectors.inventory import GpuPlaceConflict, GpuPlaces, Inventory
from collectors.parquet_sink import write_dataset
from collectors.storage import DataRoot

QUARANTINE = pa.schema([
    pa.field("file", pa.string(), nullable=False),
    pa.field("line_no", pa.int64(), nullable=False),
    pa.field("raw_line", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("quarantined_at", TS, nullable=False),
])
"""`quarantine/power/<importer>-<file>-<hash>.parquet`: one row per rejected input line."""

# Canonical nvidia-smi property → our role; aliases map to the canonical name.
_ALIASES = {"clocks.current.sm": "clocks.sm", "gpu_uuid": "uuid", "gpu_name": "name",
            "enforced.power.limit": "power.limit.enforced", "power.limit": "power.limit.enforced"}
_KNOWN = {"timestamp", "index", "uuid", "name", "power.draw", "power.draw.instant", "power.draw.average",
          "clocks.sm", "utilization.gpu", "memory.used", "temperature.gpu", "power.limit.enforced"}
_MISSING = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[gpu is lost]", "[no permission]"}
_INSTANT_DRAW_NAMES = re.compile(r"a100|a30\b|v100|t4\b|p100|p40|p4\b|k80|titan v|quadro|rtx [2-8]000\b", re.I)
_TS_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
MAX_POWER_W = 5000.0
MAX_WEST_MIN, MAX_EAST_MIN = 12 * 60, 14 * 60
"""The offsets of the world's zones: UTC-12:00 (Baker Island) to UTC+14:00 (Line Islands)."""


class ImportError_(ValueError):
    """A file that cannot be imported at all (no header, no timestamp column): one line for the user."""


def normalize_header(name: str) -> str:
    """'power.draw [W]' → 'power.draw'; ' utilization.gpu [%]' → 'utilization.gpu'."""
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", name.strip()).strip().lower()
    return _ALIASES.get(name, name)


def resolve_tz(value: str | None) -> tuple[dt.tzinfo, str]:
    """An IANA zone, a ±HH:MM offset, or (None) this machine's zone: (tzinfo, printable name)."""
    if value:
        m = re.fullmatch(r"(?:UTC)?([+-])(\d{1,2}):?(\d{2})?", value.strip())
        if m:
            minutes = int(m.group(2)) * 60 + int(m.group(3) or 0)
            if int(m.group(3) or 0) >= 60 or not -MAX_WEST_MIN <= (minutes if m.group(1) == "+" else -minutes) <= MAX_EAST_MIN:
                raise ImportError_(f"time zone offset {value!r} out of range: UTC offsets run from -12:00 to +14:00 (minutes below 60)")
            sign = 1 if m.group(1) == "+" else -1
            off = dt.timedelta(minutes=sign * minutes)
            return dt.timezone(off), f"UTC{m.group(1)}{int(m.group(2)):02d}:{int(m.group(3) or 0):02d}"
        try:
            return ZoneInfo(value), value
        except (ZoneInfoNotFoundError, ValueError):
            raise ImportError_(f"unknown time zone {value!r}: use an IANA name (America/Phoenix) or an offset (-07:00)") from None
    return _machine_zone()


def _machine_zone() -> tuple[dt.tzinfo, str]:
    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        try:
            link = os.path.realpath("/etc/localtime")
            name = link.split("zoneinfo/", 1)[1] if "zoneinfo/" in link else ""
        except OSError:
            name = ""
    if name:
        try:
            return ZoneInfo(name), f"{name} (this machine's zone)"
        except (ZoneInfoNotFoundError, ValueError):
            pass
    off = dt.timedelta(seconds=-time.timezone)
    return dt.timezone(off), f"UTC{'+' if off >= dt.timedelta(0) else '-'}{abs(off) // dt.timedelta(hours=1):02d}:00 (this machine's offset)"


def _number(raw: str) -> float | None:
    """'84.84', '84.84 W', '[N/A]' → 84.84 / None; raises ValueError on anything else."""
    s = raw.strip()
    if s.lower() in _MISSING:
        return None
    return float(s.split()[0])


def _parse_ts(raw: str) -> dt.datetime:
    s = raw.strip()
    for fmt in _TS_FORMATS:
        try:
            return dt.datetime.strptime(s, fmt)
        except ValueError:
            continue
    raise ValueError(raw)


@dataclass
class ImportResult:
    rows: int = 0
    quarantined: int = 0
    files: int = 0
    headers_skipped: int = 0
    gpus: set = field(default_factory=set)
    first_ts: dt.datetime | None = None
    last_ts: dt.datetime | None = None
    tz_name: str = ""
    tz_given: bool = True
    """Whether --tz named the zone (else this machine's zone was assumed)."""
    offsets: set = field(default_factory=set)
    """The UTC offsets the zone gave the rows (two across a DST change)."""
    power_rules: list[str] = field(default_factory=list)
    reasons: dict = field(default_factory=dict)
    written: list[Path | str] = field(default_factory=list)  # Paths, or s3:// URLs on S3
    places: GpuPlaces | None = None
    """Where each GPU was stored: by its uuid where the inventory knows it, else --host and its index."""

    def zone_text(self) -> str:
        """Which zone the zone-less timestamps were read in, every time: the offsets applied, the zone's
        name and whether it was assumed (no --tz: this machine's zone), because a wrong zone shifts
        power against request logs by hours without any other sign."""
        name = self.tz_name.replace(" (this machine's zone)", "").replace(" (this machine's offset)", "")
        offsets = ", ".join(_offset_text(o) for o in sorted(self.offsets)) or name
        why = [name] if name != offsets else []
        why.append("--tz" if self.tz_given else f"this machine's {'offset' if 'offset' in self.tz_name else 'zone'}: no --tz given")
        return f"timestamps had no zone: read as {offsets} ({', '.join(why)})"

    def summary(self, host: str) -> str:
        span = (f"{self.first_ts:%Y-%m-%d %H:%M:%S} → {self.last_ts:%Y-%m-%d %H:%M:%S} UTC" if self.first_ts else "no rows")
        why = "; ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items())) or "none"
        return (f"imported {self.rows} rows from {self.files} file(s) for host {host} "
                f"(GPUs {','.join(map(str, sorted(self.gpus))) or '-'}; {span}); {self.zone_text()}; "
                f"{' | '.join(sorted(set(self.power_rules)))}; quarantined {self.quarantined} line(s) ({why})"
                + (f"; {self.places.summary('--host and index')}" if self.places is not None and self.places.inventory is not None else ""))


def _offset_text(offset: dt.timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    return f"UTC{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _power_rule(cols: dict[str, int], mode: str, first_name: str | None) -> tuple[str | None, str | None, str]:
    """Which columns feed power_w and power_avg_w, and the rule text for the summary."""
    has = cols.__contains__
    avg_col = "power.draw.average" if has("power.draw.average") else None
    if mode == "auto" and has("power.draw.instant"):
        return "power.draw.instant", avg_col or ("power.draw" if has("power.draw") else None), \
            "power.draw.instant → power_w, power.draw(.average) → power_avg_w"
    if not has("power.draw"):
        return (None, avg_col, "power.draw.average → power_avg_w (no instant column)") if avg_col else (None, None, "no power column")
    if mode == "instant" or (mode == "auto" and first_name and _INSTANT_DRAW_NAMES.search(first_name)):
        why = "--power-draw instant" if mode == "instant" else f"GPU {first_name!r} reports instantaneous power.draw"
        return "power.draw", avg_col, f"power.draw → power_w ({why})"
    why = "--power-draw average" if mode == "average" else \
        "1 s average on Ampere+ and no instant column; pass --power-draw instant for A100/pre-Ampere logs"
    return None, "power.draw", f"power.draw → power_avg_w ({why})"


_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def detect_encoding(head: bytes) -> tuple[str, int]:
    """(encoding, BOM length) from a file's first bytes: a UTF-8 or UTF-16 BOM (PowerShell's
    ``>`` and ``Out-File`` write UTF-16 LE with one), UTF-16 without a BOM when every other byte
    of an ASCII header is NUL, else UTF-8."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, len(bom)
    if len(head) >= 4 and head[1] == 0 and head[3] == 0 and head[0] and head[2]:
        return "utf-16-le", 0
    if len(head) >= 4 and head[0] == 0 and head[2] == 0 and head[1] and head[3]:
        return "utf-16-be", 0
    return "utf-8", 0


def _read_lines(path: Path):
    """(line number, text, None) or, for a line that does not decode, (n, its text with U+FFFD
    for the bad bytes, the reason)."""
    with open(path, "rb") as fh:
        encoding, bom = detect_encoding(fh.read(4))
        fh.seek(bom)
        if encoding == "utf-8":
            for n, raw in enumerate(fh, start=1):
                raw = raw.rstrip(b"\r\n")
                try:
                    yield n, raw.decode("utf-8"), None
                except UnicodeDecodeError:
                    yield n, raw.decode("utf-8", "replace"), "not UTF-8"
            return
        # UTF-16: decoded as a stream (a code unit may straddle reads); a line with a unit that
        # does not decode (a lone surrogate, an odd last byte) is quarantined like non-UTF-8.
        text = io.TextIOWrapper(fh, encoding=encoding, errors="replace", newline="\n")
        for n, line in enumerate(text, start=1):
            line = line.rstrip("\r\n")
            yield n, line, (f"not {encoding.upper()}" if "\ufffd" in line else None)


def import_files(paths: list[Path], data_dir: Path | str | DataRoot, host: str, tz: str | None = None,
                 power_draw: str = "auto", inventory: Inventory | None = None) -> ImportResult:
    """Import nvidia-smi CSV files for ``host`` into ``data_dir`` (local or ``s3://``); see the
    module docstring for the rules. A GPU whose ``uuid`` column the ``inventory`` knows is stored as
    the inventory's host and index (:class:`collectors.inventory.GpuPlaces`), others under ``host``."""
    if power_draw not in ("auto", "instant", "average"):
        raise ImportError_(f"--power-draw must be auto, instant or average, not {power_draw!r}")
    zone, res_tz = resolve_tz(tz)
    res = ImportResult(tz_name=res_tz, tz_given=tz is not None, places=GpuPlaces(inventory))
    for path in paths:
        _import_one(Path(path), DataRoot.open(data_dir), host, zone, power_draw, res)
    return res


def _import_one(path: Path, root: DataRoot, host: str, zone, mode: str, res: ImportResult) -> None:
    if not path.is_file():  # /dev/zero, a pipe: endless or read once, and the file is read twice
        raise ImportError_(f"{path}: not a regular file (copy the log to a file first)")
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha1").hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem)[:60]
    prefix = f"nvidia-smi-{stem}-{digest}"
    cols: dict[str, int] | None = None
    header_text = None
    bad: list[tuple[int, str, str]] = []
    out = {k: [] for k in ("ts", "host", "gpu", "gpu_uuid", "power_w", "power_avg_w", "sm_clock_mhz", "gpu_util_pct",
                           "mem_used_mib", "temp_c", "power_limit_w")}
    seen: dict[tuple[str, int, int], int] = {}
    places = res.places or GpuPlaces(None)
    p_col = a_col = None
    utc = dt.UTC
    for n, line, undecodable in _read_lines(path):
        if undecodable:
            bad.append((n, line, undecodable))
            continue
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if cols is None or normalize_header(fields[0]) == "timestamp":
            names = [normalize_header(f) for f in fields]
            if "timestamp" not in names:
                if cols is None:
                    raise ImportError_(f"{path}: line {n} is not an nvidia-smi CSV header (no 'timestamp' column)")
            else:
                if cols is not None:
                    res.headers_skipped += 1
                    if line != header_text:
                        raise ImportError_(f"{path}: line {n} starts a different header; split the file")
                    continue
                cols = {name: i for i, name in enumerate(names) if name in _KNOWN}
                header_text = line
                if "index" not in cols:
                    raise ImportError_(f"{path}: no 'index' column (query timestamp,index,...)")
                continue
        if len(fields) != len(header_text.split(",")):
            bad.append((n, line, f"wrong field count: {len(fields)}, header has {len(header_text.split(','))}"))
            continue
        if p_col is None and a_col is None:
            name = fields[cols["name"]] if "name" in cols else None
            p_col, a_col, rule = _power_rule(cols, mode, name)
            res.power_rules.append(rule)
            if p_col is None and a_col is None:
                raise ImportError_(f"{path}: no power.draw column")
        try:
            local = _parse_ts(fields[cols["timestamp"]])
        except ValueError:
            bad.append((n, line, f"bad timestamp: {fields[cols['timestamp']]!r}"))
            continue
        try:
            gpu = int(fields[cols["index"]])
            if not 0 <= gpu <= 255:
                raise ValueError
        except ValueError:
            bad.append((n, line, f"bad GPU index: {fields[cols['index']]!r}"))
            continue
        try:
            vals = {c: (_number(fields[i]) if c not in ("timestamp", "index", "uuid", "name") else None)
                    for c, i in cols.items()}
        except ValueError:
            col = next(c for c, i in cols.items() if c not in ("timestamp", "index", "uuid", "name")
                       and not _is_number(fields[i]))
            bad.append((n, line, f"bad number in {col}: {fields[cols[col]]!r}"))
            continue
        pw = vals.get(p_col) if p_col else None
        avg = vals.get(a_col) if a_col else None
        if pw is None and avg is None:
            bad.append((n, line, "no power reading ([N/A])"))
            continue
        if any(v is not None and not 0 <= v <= MAX_POWER_W for v in (pw, avg)):
            bad.append((n, line, f"power out of range 0..{MAX_POWER_W:.0f} W"))
            continue
        try:
            aware = local.replace(tzinfo=zone)
            ts = aware.astimezone(utc)
            res.offsets.add(aware.utcoffset())
        except (OverflowError, ValueError):  # year 1 or 9999 shifted out of datetime's range
            ts = None
        problem = write_day_problem(ts.date()) if ts else f"day of {local.isoformat(sep=' ')} is outside the days the pipeline can run ({writable_range()})"
        if problem:
            bad.append((n, line, f"date out of range: {problem}"))
            continue
        ts_ns = int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1000
        uuid = fields[cols["uuid"]] if "uuid" in cols and fields[cols["uuid"]].lower() not in _MISSING else None
        try:
            at_host, at_gpu = places.place(host, gpu, uuid)
        except GpuPlaceConflict as exc:
            bad.append((n, line, f"GPU place conflict: {exc}"))
            continue
        key = (at_host, at_gpu, ts_ns)
        if key in seen:
            bad.append((n, line, f"duplicate of line {seen[key]} (same GPU and timestamp)"))
            continue
        seen[key] = n
        out["ts"].append(ts_ns)
        out["host"].append(at_host)
        out["gpu"].append(at_gpu)
        out["gpu_uuid"].append(uuid)
        out["power_w"].append(pw)
        out["power_avg_w"].append(avg)
        out["sm_clock_mhz"].append(_int(vals.get("clocks.sm"), 65535))
        out["gpu_util_pct"].append(_int(vals.get("utilization.gpu"), 255))
        out["mem_used_mib"].append(_int(vals.get("memory.used"), 2**32 - 1))
        out["temp_c"].append(_int(vals.get("temperature.gpu"), 255))
        out["power_limit_w"].append(vals.get("power.limit.enforced"))
        res.gpus.add(gpu)
        res.first_ts = min(res.first_ts or ts, ts)
        res.last_ts = max(res.last_ts or ts, ts)
    if cols is None and bad:
        raise ImportError_(f"{path}: not an nvidia-smi CSV log: no header, and {len(bad)} line(s) that are not text ({bad[0][2]})")
    if cols is None:
        raise ImportError_(f"{path}: empty file (no header)")
    res.files += 1
    n = len(out["ts"])
    if n:
        types = {f.name: f.type for f in POWER} | {"ts": TS}  # ns ints; conform() converts
        table = pa.table({
            **{k: pa.array(v, types[k]) for k, v in out.items()},
            "energy_j": pa.nulls(n, pa.float64()),
            "source": pa.array(["nvidia-smi" if p_col else "nvidia-smi-average"] * n, pa.string()).dictionary_encode(),
        })
        res.written += write_dataset(table, root, "power", prefix=prefix, sort_by=["gpu", "ts"], unique_names=False)
        res.rows += n
    if bad:
        now = time.time_ns() // 1000 * 1000  # µs: readable as datetime without pandas
        q = pa.table({"file": [str(path)] * len(bad), "line_no": [b[0] for b in bad], "raw_line": [b[1] for b in bad],
                      "reason": [b[2] for b in bad], "quarantined_at": pa.array([now] * len(bad), TS)}, schema=QUARANTINE)
        res.written.append(root.write_parquet(f"quarantine/power/{prefix}.parquet", q))
        res.quarantined += len(bad)
        for b in bad:
            kind = re.split(r"[:(]| of line| in | 0\.\.", b[2])[0].strip()
            res.reasons[kind] = res.reasons.get(kind, 0) + 1


def _is_number(raw: str) -> bool:
    try:
        _number(raw)
        return True
    except ValueError:
        return False


def _int(v: float | None, hi: int) -> int | None:
    return int(round(v)) if v is not None and 0 <= v <= hi else None
