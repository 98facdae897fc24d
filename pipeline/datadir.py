"""What a data dir holds, by name: the raw files of a dataset and day, the inventory, its
clusters and which cluster a host's files belong to. Pure file and inventory lookups (no DuckDB),
so the warehouse, the quarantine, the S3 staging and the resources all build on it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from collectors import assignments
from collectors.atomic import TMP_PREFIX, exclusive_lock
from collectors.contract import ASSIGNMENTS, DATASETS
from collectors.inventory import INVENTORY_FILE, Inventory, load_inventory
from collectors.storage import walk_matches
from pipeline.scope import UNASSIGNED, Scope


@contextlib.contextmanager
def quarantine_lock(data_dir: Path) -> Iterator[None]:
    """The file quarantine's lock on a data dir (or an S3 data dir's work dir): validation moves
    files and logs them, one process at a time (a UI-launched run and ``wattline run`` may validate
    the same day), and on S3 a stage mirrors the quarantine folders only outside it: a mirror
    deletes local files the bucket lacks, so one interleaved with another worker's quarantine
    (log written locally, not yet uploaded) deleted that worker's log row and its check passed."""
    with exclusive_lock(data_dir / ".quarantine.lock"):
        yield


def _day_pattern(dataset: str, date: str | None) -> str:
    ds = DATASETS[dataset]
    return ds.glob() if date is None else ds.glob().replace("date=*", f"date={date}", 1)


def raw_files(data_dir: Path, dataset: str, date: str | None = None) -> list[Path]:
    """The dataset's files (of one day): regular files reached without a symbolic link (see
    :func:`linked_paths`), temporary files of writers left out."""
    files, _ = walk_matches(data_dir, _day_pattern(dataset, date))
    return sorted(p for p in files if not p.name.startswith(TMP_PREFIX))


FolderState = tuple[int, int, int, int, int] | None
"""A path's (mode, device, inode, mtime ns, ctime ns) by ``lstat``, None when missing."""

RACY_NS = 2_000_000_000
"""A folder changed this recently is not trusted to show its next change in its mtime (timestamps
are taken at the clock's tick, so two changes within one tick can leave the same mtime): a walk
that met one is not remembered."""

_WALKS: dict[tuple[str, str], tuple[list[tuple[str, FolderState]], list[Path], list[Path]]] = {}


def _state(path: str) -> FolderState:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def dataset_paths(data_dir: Path, dataset: str) -> tuple[list[Path], list[Path]]:
    """Every day's files of the dataset and the symbolic links in their way (as
    ``collectors.storage.walk_matches`` finds them, temporary files left out), remembered with the
    state of each folder the walk looked into and of each fixed name it looked up: while none has
    changed (a file added, removed or renamed changes its folder's mtime), the answer is the same
    and costs one ``lstat`` per folder instead of one per file. The catalog's publish asks it of
    every raw dataset after each part a run writes."""
    pattern = DATASETS[dataset].glob()
    key = (str(data_dir), pattern)
    remembered = _WALKS.get(key)
    if remembered is not None and all(_state(path) == state for path, state in remembered[0]):
        return list(remembered[1]), list(remembered[2])
    looked: list[tuple[str, FolderState]] = []
    found, links = walk_matches(data_dir, pattern, lambda path: looked.append((path, _state(path))))
    files = [f for f in found if not f.name.startswith(TMP_PREFIX)]
    settled = time.time_ns() - RACY_NS
    if all(state is None or state[3] < settled for _, state in looked):
        if len(_WALKS) >= 64:
            _WALKS.clear()
        _WALKS[key] = (looked, sorted(files), links)
    return sorted(files), list(links)


def linked_paths(data_dir: Path, dataset: str, date: str | None = None) -> dict[Path, str]:
    """{link: its target} of the symbolic links where the dataset's files (of one day) would be
    looked for: a linked ``power``, ``date=D`` or ``host=H`` folder, or a linked ``*.parquet``.
    They are not read, moved or rewritten (a link may lead out of the data dir): the pipeline
    names them in its checks and its summary instead."""
    _, links = walk_matches(data_dir, _day_pattern(dataset, date))
    return {link: os.readlink(link) for link in sorted(links)}


def link_reason(target: str) -> str:
    """Why a linked path is not read, in the words of the checks and ``wattline check``."""
    return (f"a symbolic link (to {target}), not read: the pipeline reads only files inside the data dir "
            f"(copy the files in, or make the whole data dir the link)")


_PARSED: dict[tuple[str, bytes], Inventory] = {}
"""Inventories parsed in this process, by file and content: a run asks for the inventory ~60 times
(every compute connection, file check and cluster filter) and it rarely changes; its validation
is most of what a read costs. An :class:`Inventory` is frozen, so one object serves them all."""


def load_inventory_if_any(data_dir: Path) -> Inventory | None:
    """The data dir's inventory (None without one), parsed again only when its bytes changed."""
    path = data_dir / INVENTORY_FILE
    if not path.exists():
        return None
    try:
        key = (str(path), path.read_bytes())
    except OSError:
        return load_inventory(path)  # a folder, unreadable: the loader's own error
    if key in _PARSED:
        return _PARSED[key]
    inventory = load_inventory(path)
    with contextlib.suppress(OSError):
        if path.read_bytes() == key[1]:  # not rewritten while it was parsed: these bytes are this inventory
            if len(_PARSED) >= 16:
                _PARSED.clear()
            _PARSED[key] = inventory
    return inventory


def clusters(data_dir: Path) -> list[str]:
    """The inventory's clusters (the cluster partitions), in inventory order."""
    inventory = load_inventory_if_any(data_dir)
    return [c.name for f in inventory.fleets for c in f.clusters] if inventory else []


def stored_assignments(inventory: Inventory, data_dir: Path) -> list[dict]:
    """The rows of the data dir's assignments dataset that the inventory accepts (host and gpu
    resolved; collectors.assignments.check_rows)."""
    return assignments.check_rows(inventory, pa.Table.from_pylist(assignments.existing_rows(data_dir), schema=ASSIGNMENTS))[0]


def cluster_members(inventory: Inventory, cluster: str, stored: list[dict] | None = None) -> tuple[list[str], list[str]]:
    """The cluster's host names and inference endpoint names: those its hosts list, and those an
    assignment (the inventory's timed ``assignments:``, and ``stored``: the assignments dataset's
    rows, :func:`stored_assignments`) puts on one of its GPUs at some time, wherever the inventory
    declares them; the cluster-day sees those endpoints' requests and counts them only while they
    held its GPUs."""
    hosts = [h for _, c, h in inventory.iter_hosts() if c.name == cluster]
    names = [h.name for h in hosts]
    endpoints = [e.name for h in hosts for e in h.endpoints]
    rows = inventory.timed_assignment_rows() + (stored or [])
    for row in rows:
        if row["kind"] == "endpoint" and row["host"] in names and row["name"] not in endpoints:
            endpoints.append(row["name"])
    return names, endpoints


def host_filter(inventory: Inventory | None, cluster: str):
    """Whether a host's files belong to ``cluster`` (for UNASSIGNED: hosts the inventory lacks)."""
    known = {h.name for _, _, h in inventory.iter_hosts()} if inventory else set()
    if cluster == UNASSIGNED:
        return lambda host: host not in known
    members = set(cluster_members(inventory, cluster)[0]) if inventory else set()
    return lambda host: host in members


def host_of(path: Path) -> str | None:
    return next((part.split("=", 1)[1] for part in path.parts if part.startswith("host=")), None)


def day_clusters(data_dir: Path, date: str) -> list[str]:
    """The day's cluster-days: the inventory's clusters, and UNASSIGNED when the day has power
    files of hosts the inventory does not list (they are computed per GPU and named by a check,
    never dropped)."""
    names = clusters(data_dir)
    unknown = host_filter(load_inventory_if_any(data_dir), UNASSIGNED)
    if any(unknown(host_of(f)) for f in raw_files(data_dir, "power", date)):
        names.append(UNASSIGNED)
    return names


def scope_host_filter(data_dir: Path, scope: Scope) -> Callable[[str | None], bool]:
    """Whether a host's files are the scope's: its cluster's hosts (every host outside a cluster-day)."""
    if not scope.cluster:
        return lambda host: True
    return host_filter(load_inventory_if_any(data_dir), scope.cluster)
