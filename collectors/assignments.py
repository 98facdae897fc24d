"""Which endpoint or job holds each GPU, over time: the inventory's lists (the default), its timed
``assignments:``, and the explicit sources (training ``job_events``, the ``assignments`` dataset
written by ``wattline import assignments`` and ``wattline import prometheus``).

Resolution per GPU: an explicit source's interval overrides the inventory there; the inventory's
timed assignments override its hosts' lists; a GPU one workload lists is that workload's
wherever nothing else is said. One GPU belongs to one workload at a time: two intervals of one
level that overlap and name different workloads are a conflict, named with both sources.
"""

from __future__ import annotations

import bisect
import datetime
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from collectors.contract import ASSIGNMENTS, ASSIGNMENTS_DIR, conform
from collectors.inventory import Inventory
from collectors.storage import DataRoot

OPEN_LO_NS = -(2**62)
OPEN_HI_NS = 2**62
"""An open end of an assignment, in ns since the epoch (stored as NULL)."""
KINDS = ("endpoint", "job")
_LEVEL = {"inventory-lists": 0, "inventory": 1}  # any other source is explicit: level 2


class AssignmentConflict(ValueError):
    """Two sources (or two rows of one) give one GPU to two workloads at once."""


@dataclass(frozen=True)
class Held:
    host: str
    gpu: int
    kind: str
    name: str
    lo_ns: int
    hi_ns: int
    source: str

    @property
    def level(self) -> int:
        return _LEVEL.get(self.source, 2)

    def describe(self) -> str:
        def at(t: int, open_: int) -> str:
            return "open" if t == open_ else _iso(t)
        return (f"{self.source} gives GPU {self.gpu} of host {self.host!r} to {self.kind} {self.name!r} "
                f"from {at(self.lo_ns, OPEN_LO_NS)} to {at(self.hi_ns, OPEN_HI_NS)}")


def _iso(t_ns: int) -> str:
    return datetime.datetime.fromtimestamp(t_ns / 1e9, datetime.UTC).isoformat().replace("+00:00", "Z")


def ns(t: datetime.datetime | None, open_: int) -> int:
    """ns since the epoch of an aware (or UTC naive) instant; None is the open end ``open_``."""
    if t is None:
        return open_
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    delta = t - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def static_held(inventory: Inventory) -> list[Held]:
    """The inventory's defaults: each GPU one workload lists, for all time, and its timed assignments."""
    out = []
    for _, _, host in inventory.iter_hosts():
        for gpu, owners in host.owners().items():
            if len(owners) == 1:
                kind, name, _ = owners[0]
                out.append(Held(host.name, gpu, kind, name, OPEN_LO_NS, OPEN_HI_NS, "inventory-lists"))
    for row in inventory.timed_assignment_rows():
        out.append(Held(row["host"], int(row["gpu"]), row["kind"], row["name"], ns(row["from_ts"], OPEN_LO_NS),
                        ns(row["to_ts"], OPEN_HI_NS), "inventory"))
    return out


def job_event_held(inventory: Inventory, runs: Iterable[tuple[str, str, int, int]]) -> list[Held]:
    """Runs of a job's events on a host (job, host, start ns, end ns) as assignments of every GPU
    the inventory lists for that job on that host (events carry no GPU)."""
    gpus: dict[tuple[str, str], list[int]] = {}
    for _, _, host in inventory.iter_hosts():
        for job in host.jobs:
            gpus.setdefault((job.name, host.name), []).extend(job.gpus)
    return [Held(host, g, "job", job, int(lo), int(hi), "job_events")
            for job, host, lo, hi in runs for g in sorted(set(gpus.get((job, host), [])))]


def rows_held(rows: Iterable[dict]) -> list[Held]:
    """Rows of the assignments dataset (host and gpu resolved) as Held intervals."""
    return [Held(r["host"], int(r["gpu"]), r["kind"], r["name"], ns(r["from_ts"], OPEN_LO_NS), ns(r["to_ts"], OPEN_HI_NS),
                 r["source"]) for r in rows if r["host"] is not None and r["gpu"] is not None]


def conflicts(held: list[Held]) -> list[str]:
    """Pairs of intervals of one level that overlap on one GPU and name different workloads."""
    out = []
    by_gpu: dict[tuple[str, int, int], list[Held]] = {}
    for h in held:
        by_gpu.setdefault((h.host, h.gpu, h.level), []).append(h)
    for items in by_gpu.values():
        items.sort(key=lambda h: (h.lo_ns, h.hi_ns))
        reach: Held | None = None  # the interval reaching furthest so far
        for h in items:
            if reach is not None and h.lo_ns < reach.hi_ns and (h.kind, h.name) != (reach.kind, reach.name):
                out.append(f"{reach.describe()}, and {h.describe()}: a GPU belongs to one workload at a time")
            if reach is None or h.hi_ns > reach.hi_ns:
                reach = h
    return out


def _union(items: list[Held]) -> list[Held]:
    """One level's intervals of a GPU as sorted disjoint pieces (touching pieces of one workload and
    source merged; an overlap of two workloads, kept only when not strict, goes to the earlier)."""
    out: list[Held] = []
    for h in sorted(items, key=lambda h: (h.lo_ns, h.hi_ns, h.source)):
        last = out[-1] if out else None
        if last is not None and h.lo_ns <= last.hi_ns and (h.kind, h.name, h.source) == (last.kind, last.name, last.source):
            if h.hi_ns > last.hi_ns:
                out[-1] = Held(h.host, h.gpu, h.kind, h.name, last.lo_ns, h.hi_ns, h.source)
            continue
        lo = max(h.lo_ns, last.hi_ns) if last is not None else h.lo_ns
        if h.hi_ns > lo:
            out.append(Held(h.host, h.gpu, h.kind, h.name, lo, h.hi_ns, h.source))
    return out


def _fill(top: list[Held], lower: list[Held]) -> list[Held]:
    """``top`` (sorted, disjoint) with the parts of ``lower``'s pieces that ``top`` leaves uncovered."""
    out = list(top)
    starts = [t.lo_ns for t in top]
    for piece in lower:
        lo = piece.lo_ns
        i = max(bisect.bisect_right(starts, lo) - 1, 0)
        while lo < piece.hi_ns:
            t = top[i] if i < len(top) else None
            if t is None or t.lo_ns >= piece.hi_ns:
                out.append(Held(piece.host, piece.gpu, piece.kind, piece.name, lo, piece.hi_ns, piece.source))
                break
            if t.hi_ns <= lo:
                i += 1
                continue
            if t.lo_ns > lo:
                out.append(Held(piece.host, piece.gpu, piece.kind, piece.name, lo, t.lo_ns, piece.source))
            lo = t.hi_ns
            i += 1
    return sorted(out, key=lambda h: h.lo_ns)


def resolve(held: list[Held], strict: bool = True) -> list[Held]:
    """Each GPU's owner over time: per instant the highest level's interval (explicit > the
    inventory's timed assignments > its hosts' lists). ``strict``: a conflict raises
    AssignmentConflict naming both sides; else the earlier interval wins."""
    found = conflicts(held)
    if found and strict:
        raise AssignmentConflict(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    by_gpu: dict[tuple[str, int], dict[int, list[Held]]] = {}
    for h in held:
        by_gpu.setdefault((h.host, h.gpu), {}).setdefault(h.level, []).append(h)
    out: list[Held] = []
    for _, levels in sorted(by_gpu.items()):
        pieces: list[Held] = []
        for level in sorted(levels, reverse=True):
            pieces = _fill(pieces, _union(levels[level]))
        out += pieces
    return out


RESOLVED_SCHEMA = pa.schema([
    ("host", pa.string()), ("gpu", pa.uint8()), ("kind", pa.string()), ("name", pa.string()),
    ("from_ts", pa.timestamp("ns", tz="UTC")), ("to_ts", pa.timestamp("ns", tz="UTC")),
    ("from_ns", pa.int64()), ("to_ns", pa.int64()), ("source", pa.string()),
])


def resolved_table(held: list[Held]) -> pa.Table:
    """The ``gpu_assignments`` rows: open ends NULL in the *_ts columns, ±2^62 in the *_ns ones."""
    return pa.table({
        "host": [h.host for h in held], "gpu": [h.gpu for h in held], "kind": [h.kind for h in held],
        "name": [h.name for h in held],
        "from_ts": [None if h.lo_ns == OPEN_LO_NS else h.lo_ns for h in held],
        "to_ts": [None if h.hi_ns == OPEN_HI_NS else h.hi_ns for h in held],
        "from_ns": [h.lo_ns for h in held], "to_ns": [h.hi_ns for h in held],
        "source": [h.source for h in held],
    }, schema=RESOLVED_SCHEMA)


def check_rows(inventory: Inventory, table: pa.Table) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Rows of an assignments table split into usable ones (host and gpu resolved, UUIDs to their
    place) and set-aside ones with their reason: an unknown kind, workload or GPU, or an end not
    after its start."""
    known = {(k, n) for k in KINDS for n in _names(inventory, k)}
    good, bad = [], []
    for row in table.to_pylist():
        why = None
        if row["kind"] not in KINDS:
            why = f"kind must be endpoint or job (got {row['kind']!r})"
        elif (row["kind"], row["name"]) not in known:
            why = f"no {row['kind']} named {row['name']!r} in the inventory"
        elif row["from_ts"] is not None and row["to_ts"] is not None and row["to_ts"] <= row["from_ts"]:
            why = "to_ts is not after from_ts"
        else:
            place = inventory.resolve_gpu(row["host"], row["gpu"], row["gpu_uuid"])
            if place is None:
                why = ("uuid " + repr(row["gpu_uuid"]) if row["gpu_uuid"] is not None and row["host"] is None
                       else f"GPU {row['gpu']} of host {row['host']!r}") + " is not in the inventory"
            else:
                row = dict(row, host=place[0], gpu=place[1])
        if why:
            bad.append((row, why))
        else:
            good.append(row)
    return good, bad


def _names(inventory: Inventory, kind: str) -> set[str]:
    return {w.name for _, _, h in inventory.iter_hosts() for w in (h.endpoints if kind == "endpoint" else h.jobs)}


def existing_rows(data_dir: DataRoot | Path | str, leave_out: str | None = None) -> list[dict]:
    """Every row of the data dir's assignments dataset, on a local folder or an ``s3://`` one, but
    the file named ``leave_out`` (one that a re-import is about to replace)."""
    root = DataRoot.open(data_dir)
    keys = [k for k in root.list(f"{ASSIGNMENTS_DIR}/*.parquet")  # never through a link; writers' temporary files left out
            if k.rsplit("/", 1)[-1] != leave_out]
    return root.read_parquet(keys, schema=ASSIGNMENTS).to_pylist() if keys else []


def check_new_rows(data_dir: DataRoot | Path | str, inventory: Inventory, rows: list[dict],
                   leave_out: str | None = None) -> tuple[list[dict], list[tuple[dict, str]]]:
    """``rows`` to be written, split as :func:`check_rows` does; AssignmentConflict (naming both
    sides) when a usable one gives a GPU to another workload than an explicit source already
    stored does at that time (the stored file ``leave_out`` is left out: it is being replaced)."""
    good, bad = check_rows(inventory, pa.Table.from_pylist(rows, schema=ASSIGNMENTS))
    stored = [r for r in existing_rows(data_dir, leave_out) if r["source"] != "inventory"]
    known, _ = check_rows(inventory, pa.Table.from_pylist(stored, schema=ASSIGNMENTS))
    found = conflicts(rows_held(known + good))
    if found:
        raise AssignmentConflict(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    return good, bad


def write_assignments(data_dir: DataRoot | Path | str, rows: list[dict], source: str,
                      name: str | None = None) -> str | Path | None:
    """Write ``rows`` (assignments dataset rows) as one file: a new ``assignments/<source>-*.parquet``,
    or ``assignments/<name>`` (replaced, and removed when there are no rows)."""
    root = DataRoot.open(data_dir)
    key = f"{ASSIGNMENTS_DIR}/{name or f'{source}-{uuidlib.uuid4().hex[:12]}.parquet'}"
    if not rows:
        if name:
            root.delete(key)
        return None
    table = conform(pa.Table.from_pylist([dict(r, source=source) for r in rows], schema=ASSIGNMENTS), ASSIGNMENTS,
                    where=f"assignments from {source}")
    return root.write_parquet(key, table)
