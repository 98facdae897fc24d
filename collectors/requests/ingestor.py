"""Bulk ingestion of request logs: files in, Parquet and quarantine out, one summary.

Every batch is committed the same way (:meth:`Ingestor.commit`): new rows to
``requests/``, rejected lines and conflicting duplicates to ``quarantine/requests/``, counts
into the :class:`Summary`. The follow mode (:mod:`collectors.requests.tail`) uses the same commit.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import yaml

from collectors.days import writable_ns_bounds, write_day_problem
from collectors.inventory import INVENTORY_FILE, parse_inventory
from collectors.printable import printable
from collectors.requests.azure import NotAzureTrace, read_azure
from collectors.requests.jsonl import DEFAULT_MAX_DEPTH, parse_block, parse_lines
from collectors.requests.lines import DEFAULT_MAX_LINE_BYTES, Block, Line, iter_blocks
from collectors.requests.otlp import Mapped, read_otlp_lines
from collectors.requests.progress import byte_progress
from collectors.requests.quarantine import OUT_OF_RANGE, Reject, write_quarantine
from collectors.requests.store import RequestStore, empty_frame, writer_lock
from collectors.requests.timestamps import utc_day
from collectors.requests.vllm_bench import NoEndpoint, NotBenchResult, read_vllm_bench
from collectors.storage import DataRoot

FORMATS = ("jsonl", "azure", "vllm-bench", "otlp")
PATTERNS = {"jsonl": ("*.jsonl", "*.jsonl.*", "*.ndjson"), "azure": ("*.csv",), "vllm-bench": ("*.json",),
            "otlp": ("*.json", "*.jsonl", "*.json.*", "*.jsonl.*")}
"""Which files of a directory each format takes."""
CHUNK_LINES = 250_000
"""JSONL rows per commit (one Parquet file per day per commit)."""
COMMIT_ROWS = 1_000_000
"""Trace rows per Parquet file in bulk imports (fewer, larger files)."""
UNKNOWN_ENDPOINT_POLICIES = ("allow", "refuse", "quarantine")
"""What a request of an endpoint no one declared does: stored anyway; stops a bulk import before its
batch is written; quarantined alone with its reason (the live paths, which must not stop)."""
NOT_IN_INVENTORY = "endpoint not in inventory.yaml"
"""Reason prefix of a request quarantined for its endpoint."""


class UnknownEndpoint(ValueError):
    """Requests for endpoints neither the inventory nor the assignments know (or no inventory)."""

    def __init__(self, names: list[str], known: frozenset | None, data_dir: str) -> None:
        self.names = names
        self.known = known
        if known is None:
            message = (f"no inventory.yaml in {data_dir}, so no endpoint is known"
                       + (f" (the requests name {_names(names)})" if names else "")
                       + ": write the inventory naming the endpoints, or pass --allow-unknown-endpoint")
        else:
            message = (f"endpoint(s) not in inventory.yaml: {_names(names)}; known: "
                       + (_names(sorted(known)) if known else "none")
                       + " (name a known one with --endpoint, add it to the inventory, or pass --allow-unknown-endpoint)")
        super().__init__(message)


def _names(names: list[str], most: int = 20) -> str:
    shown = ", ".join(printable(n, 100) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def known_endpoints(data_dir: Path | str | DataRoot) -> frozenset | None:
    """Every endpoint name requests may be stored under: the inventory's endpoints (a later source
    of assignments adds its names here); None without an inventory (nothing is known)."""
    root = DataRoot.open(data_dir)
    if not root.exists(INVENTORY_FILE):
        return None
    inv = parse_inventory(yaml.safe_load(root.read_bytes(INVENTORY_FILE)), INVENTORY_FILE)
    return frozenset(ep.name for _, _, host in inv.iter_hosts() for ep in host.endpoints)


@dataclass
class Summary:
    files_read: int = 0
    ingested: int = 0
    quarantined: int = 0
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)  # files that could not be read at all
    reasons: Counter = field(default_factory=Counter)  # newly quarantined lines by reason kind
    skipped: Counter = field(default_factory=Counter)  # OTLP: spans ignored (not llm_request), by reason
    endpoints: Counter = field(default_factory=Counter)  # OTLP: spans mapped, by endpoint
    known_endpoints: frozenset | None = None  # the inventory's endpoints, when there is an inventory

    def line(self, source: str | None = None) -> str:
        """The summary line; every name in it that came from the input goes through ``printable``."""
        return (
            f"ingested {self.ingested} request(s), quarantined {self.quarantined}, "
            f"duplicates {self.duplicates} (from {source or f'{self.files_read} file(s)'}"
            + (f"; {len(self.errors)} unreadable" if self.errors else "")
            + ")"
            + ("; quarantine reasons: " + ", ".join(f"{printable(k, 200)} {n}" for k, n in self.reasons_by_count())
               if self.reasons else "")
            + "".join(f"; skipped {n} span(s): {printable(k, 200)}" for k, n in sorted(self.skipped.items()))
            + (f"; {sum(self.unknown_endpoints().values())} span(s) of endpoint(s) not in inventory.yaml: "
               + ", ".join(f"{printable(k, 200)} ({n})" for k, n in sorted(self.unknown_endpoints().items()))
               if self.unknown_endpoints() else "")
        )

    def unknown_endpoints(self) -> Counter:
        """Mapped spans whose endpoint the inventory does not list (all of them without an inventory)."""
        if self.known_endpoints is None:
            return Counter()
        return Counter({k: n for k, n in self.endpoints.items() if k not in self.known_endpoints})

    def add_mapped(self, mapped: Mapped) -> None:
        self.skipped.update(mapped.skipped)
        self.endpoints.update(mapped.endpoints)

    def reasons_by_count(self) -> list[tuple[str, int]]:
        """Most frequent first, ties by name: the same line whatever order the lines were stored in."""
        return sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))


class Ingestor:
    """Commits parsed batches for one data dir and keeps the counts."""

    def __init__(self, data_dir: Path | str | DataRoot, fmt: str, *, endpoint: str | None = None,
                 endpoint_from: str | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_depth: int = DEFAULT_MAX_DEPTH,
                 progress: bool | None = None, unknown_endpoint: str = "allow") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
        if unknown_endpoint not in UNKNOWN_ENDPOINT_POLICIES:
            raise ValueError(f"unknown_endpoint={unknown_endpoint!r}: expected one of {UNKNOWN_ENDPOINT_POLICIES}")
        if fmt == "azure" and endpoint is None:
            raise NoEndpoint("Azure traces name no endpoint: name it with --endpoint")
        self.root = DataRoot.open(data_dir)  # local, or s3://bucket/prefix
        self.data_dir = self.root.location("")
        self.fmt = fmt
        self.endpoint = endpoint
        self.endpoint_from = endpoint_from
        self.max_line_bytes = max_line_bytes
        self.max_depth = max_depth
        self.progress = progress
        self.store = RequestStore(self.root, prefix=f"req-{fmt}")
        self.summary = Summary()
        self.unknown_endpoint = unknown_endpoint
        self.known = known_endpoints(self.root)
        self.summary.known_endpoints = self.known if unknown_endpoint == "allow" else None
        if unknown_endpoint != "allow" and (self.known is None or (endpoint is not None and endpoint not in self.known)):
            raise UnknownEndpoint([endpoint] if endpoint is not None else [], self.known, self.data_dir)

    def split_unknown_endpoints(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Reject]]:
        """(rows of known endpoints, a reject for each other row) under the ``quarantine`` policy;
        under ``refuse`` raises :class:`UnknownEndpoint` naming them; under ``allow`` keeps all."""
        if self.unknown_endpoint == "allow" or frame.height == 0:
            return frame, []
        known = pl.col("endpoint").is_in(sorted(self.known or ()))
        if frame.select(known.all()).item():
            return frame, []
        unknown = frame.filter(~known)
        if self.unknown_endpoint == "refuse":
            raise UnknownEndpoint(sorted(set(unknown["endpoint"].to_list())), self.known, self.data_dir)
        rejects, (first, end) = [], writable_ns_bounds()
        for row in unknown.iter_rows(named=True):
            raw = row["_raw"] if row["_raw"] is not None else b""
            reason = f"{NOT_IN_INVENTORY}: {printable(row['endpoint'], 200)}"
            day = utc_day(row["arrival_ts"]) if first <= row["arrival_ts"] < end else None
            rejects.append(Reject(row["_src"], row["_line"], reason, raw, len(raw), day))
        return frame.filter(known), rejects

    def commit(self, frame: pl.DataFrame, rejects: list[Reject]) -> None:
        """Requests first, then quarantine: both are atomic files, and both are deduplicated,
        so repeating a commit after a crash between the two adds nothing."""
        frame, unknown = self.split_unknown_endpoints(frame)
        frame, out_of_range = split_out_of_range(frame)
        rejects = rejects + unknown + out_of_range
        with writer_lock(self.root):
            added = self.store.add(frame)
            self.summary.ingested += added.written
            self.summary.duplicates += added.duplicates
            self.summary.quarantined += write_quarantine(rejects + added.conflicts, self.root, self.fmt,
                                                         self.summary.reasons)

    # ---- bulk

    def ingest(self, targets: list[Path]) -> Summary:
        """Ingest every file; a file that cannot be read is noted and skipped. Errors writing
        the data dir propagate: what was committed stays, and a re-run adds only the rest."""
        for path in expand(targets, self.fmt):
            try:
                with open(path, "rb"):
                    pass
                if not path.is_file():  # a device or pipe: endless, or gone once read
                    self.summary.errors.append(f"{path}: not a regular file")
                    continue
                self._ingest_file(path)
            except (NotAzureTrace, NotBenchResult) as exc:
                self.summary.errors.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
                continue
            except OSError as exc:
                if exc.filename not in (str(path), path):
                    raise
                self.summary.errors.append(f"{path}: {exc.strerror}")
                continue
            self.summary.files_read += 1
        return self.summary

    def _ingest_file(self, path: Path) -> None:
        size = path.stat().st_size
        with byte_progress(size, path.name, self.progress) as advance:
            if self.fmt == "jsonl":
                self._ingest_jsonl(path, advance)
            elif self.fmt == "otlp":
                self._ingest_otlp(path, advance)
            elif self.fmt == "azure":
                endpoint = self.endpoint
                frames, rejects = [], []
                for frame, bad in read_azure(path, endpoint, max_line_bytes=self.max_line_bytes, on_bytes=advance):
                    frames.append(frame)
                    rejects += bad
                    if sum(f.height for f in frames) >= COMMIT_ROWS:
                        self.commit(pl.concat(frames), rejects)
                        frames, rejects = [], []
                if frames or rejects:
                    self.commit(pl.concat(frames) if frames else empty_frame(), rejects)
            else:
                self.commit(*read_vllm_bench(path, self.endpoint))
                advance(size)

    def _ingest_jsonl(self, path: Path, advance) -> None:
        frames, rejects, done = [], [], 0
        with open(path, "rb") as fh:
            for item in iter_blocks(fh, max_line_bytes=self.max_line_bytes):
                parse = parse_block if isinstance(item, Block) else _parse_line
                frame, bad = parse(item, str(path), self.endpoint, self.max_depth)
                frames.append(frame)
                rejects += bad
                advance(max(0, item.end - done))
                done = max(done, item.end)
                if sum(f.height for f in frames) >= CHUNK_LINES:
                    self.commit(pl.concat(frames), rejects)
                    frames, rejects = [], []
        if frames or rejects:
            self.commit(pl.concat(frames) if frames else empty_frame(), rejects)

    def _ingest_otlp(self, path: Path, advance) -> None:
        frames, rejects = [], []
        for mapped in read_otlp_lines(path, endpoint=self.endpoint, endpoint_from=self.endpoint_from,
                                      max_line_bytes=self.max_line_bytes, on_bytes=advance):
            self.summary.add_mapped(mapped)
            frames.append(mapped.frame)
            rejects += mapped.rejects
            if sum(f.height for f in frames) >= CHUNK_LINES:
                self.commit(pl.concat(frames), rejects)
                frames, rejects = [], []
        if frames or rejects:
            self.commit(pl.concat(frames) if frames else empty_frame(), rejects)




def split_out_of_range(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Reject]]:
    """(rows whose arrival day the pipeline can run, a reject for each other row): a request
    dated 2200 or 1999 is quarantined with the range in its reason, not stored where no run
    can reach it. The quarantine entry goes under the day of ingestion."""
    first, end = writable_ns_bounds()
    inside = pl.col("arrival_ts").is_between(first, end, closed="left")
    if frame.height == 0 or frame.select(inside.all()).item():
        return frame, []
    rejects = []
    for row in frame.filter(~inside).iter_rows(named=True):
        raw = row["_raw"] if row["_raw"] is not None else b""
        reason = f"{OUT_OF_RANGE}: {write_day_problem(utc_day(row['arrival_ts']))}"  # arrival_ts >= 0: validated
        rejects.append(Reject(row["_src"], row["_line"], reason, raw, len(raw)))
    return frame.filter(inside), rejects


def _parse_line(line: Line, source: str, endpoint: str | None, max_depth: int):
    return parse_lines([line], source, endpoint, max_depth)


def expand(targets: list[Path], fmt: str) -> list[Path]:
    """Files named directly, plus the matching files of named directories (absolute, sorted, no repeats)."""
    out: list[Path] = []
    for target in targets:
        target = Path(os.path.abspath(target))  # one name per file in quarantine's source_file
        if target.is_dir():
            found = {p for pattern in PATTERNS[fmt] for p in target.glob(pattern) if p.is_file()}
            out += sorted(found, key=_natural)
        else:
            out.append(target)
    seen, unique = set(), []
    for p in out:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _natural(path: Path):
    """Rotated logs oldest first: app.jsonl.3, app.jsonl.2, app.jsonl.1, app.jsonl."""
    name = path.name
    stem, _, suffix = name.rpartition(".")
    if stem and suffix.isdigit():
        return (stem, 0, -int(suffix))
    return (name, 1, 0)
