"""The fleet inventory (``inventory.yaml`` at the data dir root): fleets → clusters → hosts → GPUs.

Validated with pydantic on load, so a typo names the bad key and its place in the file
(``inventory.yaml: fleets[0].clusters[1].hosts[0].name (line 12): ...``). Host and cluster names
become path segments and follow the rule of :mod:`collectors.names`; cluster names, host names
and a host's GPU indices are unique; a GPU belongs to at most one job or endpoint; every number
is finite (``.inf`` and ``.nan`` are YAML floats).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from collectors.names import PATH_NAME_RULE, path_name_problem

INVENTORY_FILE = "inventory.yaml"
"""The inventory's name at the root of a data dir."""


class InventoryError(ValueError):
    """The inventory file is missing or does not follow the documented shape."""


class _At(ValueError):
    """A validator's error about one item inside the model: ``loc`` continues pydantic's location."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


class _Strict(BaseModel):
    # allow_inf_nan=False: `tdp_w: .inf` would pass `gt=0` and make every share of it zero.
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


def _path_name(value: str) -> str:
    """Host and cluster names become path segments (collectors/names.py)."""
    problem = path_name_problem(value)
    if problem:
        raise ValueError(f"name {value!r} {problem}; names used in paths allow {PATH_NAME_RULE}")
    return value


class Gpu(_Strict):
    index: int = Field(ge=0, le=255)
    tdp_w: float = Field(gt=0)
    model: str | None = None


class Assignment(_Strict):
    name: str
    gpus: list[int]
    tz_offset_h: float = 0.0


class Host(_Strict):
    name: str
    role: Literal["training", "inference"]
    gpus: list[Gpu] = Field(min_length=1)
    provisioned_w: float | None = Field(default=None, gt=0)
    jobs: list[Assignment] = []
    endpoints: list[Assignment] = []

    _name_is_a_path_name = field_validator("name")(_path_name)

    @model_validator(mode="after")
    def _assignments_name_known_gpus(self) -> Host:
        indices = [g.index for g in self.gpus]
        for j, i in enumerate(indices):
            if i in indices[:j]:  # would count the GPU's TDP twice in provisioned power
                raise _At(("gpus", j, "index"), f"host {self.name!r} lists GPU index {i} more than once")
        known = set(indices)
        owner: dict[int, str] = {}
        for kind, items in (("job", self.jobs), ("endpoint", self.endpoints)):
            for k, a in enumerate(items):
                missing = sorted(set(a.gpus) - known)
                if missing:
                    raise _At((f"{kind}s", k), f"{a.name!r} uses GPU(s) {missing} that host {self.name!r} does not list")
                this = f"{kind} {a.name!r}"
                for g in a.gpus:
                    if g in owner and owner[g] != this:  # one GPU's power cannot be split between two workloads
                        raise _At((f"{kind}s", k), f"GPU {g} of host {self.name!r} is in {owner[g]} and in {this}; "
                                  "a GPU belongs to one job or endpoint")
                    owner[g] = this
        return self

    @property
    def tdp_sum_w(self) -> float:
        return sum(g.tdp_w for g in self.gpus)

    @property
    def effective_provisioned_w(self) -> float:
        return self.provisioned_w or self.tdp_sum_w


class Cluster(_Strict):
    name: str
    hosts: list[Host] = Field(min_length=1)
    provisioned_w: float | None = Field(default=None, gt=0)

    _name_is_a_path_name = field_validator("name")(_path_name)

    @property
    def effective_provisioned_w(self) -> float:
        return self.provisioned_w or sum(h.tdp_sum_w for h in self.hosts)


class Fleet(_Strict):
    name: str
    clusters: list[Cluster] = Field(min_length=1)


class Inventory(_Strict):
    fleets: list[Fleet] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique(self) -> Inventory:
        clusters: set[str] = set()
        hosts: set[str] = set()
        for f, fleet in enumerate(self.fleets):
            for c, cluster in enumerate(fleet.clusters):  # cluster names are partition keys and folder names
                if cluster.name in clusters:
                    raise _At(("fleets", f, "clusters", c, "name"), f"cluster name {cluster.name!r} appears twice")
                clusters.add(cluster.name)
                for h, host in enumerate(cluster.hosts):
                    if host.name in hosts:
                        raise _At(("fleets", f, "clusters", c, "hosts", h, "name"), f"host name {host.name!r} appears twice")
                    hosts.add(host.name)
        return self

    def iter_hosts(self):
        for fleet in self.fleets:
            for cluster in fleet.clusters:
                for host in cluster.hosts:
                    yield fleet, cluster, host

    def gpu_rows(self) -> list[dict]:
        """One row per GPU with everything the analytics join on (the ``inventory_gpus`` table)."""
        rows = []
        for fleet, cluster, host in self.iter_hosts():
            owner = {}
            for kind, items in (("job", host.jobs), ("endpoint", host.endpoints)):
                for a in items:
                    for g in a.gpus:
                        owner[g] = (kind, a.name, a.tz_offset_h)
            for gpu in host.gpus:
                kind, name, tz = owner.get(gpu.index, (None, None, 0.0))
                rows.append(
                    dict(
                        fleet=fleet.name,
                        cluster=cluster.name,
                        host=host.name,
                        role=host.role,
                        gpu=gpu.index,
                        tdp_w=float(gpu.tdp_w),
                        gpu_model=gpu.model,
                        endpoint=name if kind == "endpoint" else None,
                        job=name if kind == "job" else None,
                        endpoint_tz_offset_h=tz if kind == "endpoint" else None,
                        host_provisioned_w=float(host.effective_provisioned_w),
                        cluster_provisioned_w=float(cluster.effective_provisioned_w),
                    )
                )
        return rows


def _where(loc: tuple) -> str:
    """``fleets[0].clusters[1].name`` from pydantic's ``('fleets', 0, 'clusters', 1, 'name')``."""
    text = ""
    for p in loc:
        text += f"[{p}]" if isinstance(p, int) else f".{p}" if text else str(p)
    return text or "(top level)"


def _line_of(node, loc: tuple) -> int | None:
    """The 1-based line of ``loc`` in a composed YAML document (the deepest node found)."""
    line = None
    for p in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == p), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
            node = node.value[p]
        else:
            node = None
    return node.start_mark.line + 1 if node is not None else line


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: same results, faster


def parse_inventory(data: object, source: str = "inventory", text: str | None = None) -> Inventory:
    """Validate ``data``; ``text`` (the YAML it was read from) lets an error give its line."""
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        document = yaml.compose(text, Loader=_LOADER) if text is not None else None
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, _At):
            loc += cause.loc
        line = _line_of(document, loc) if document is not None else None
        at = f" (line {line})" if line else ""
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise InventoryError(" ".join(f"{source}: {_where(loc)}{at}: {msg}{more}".split())) from None


def load_inventory(path: Path | str) -> Inventory:
    path = Path(path)
    if not path.exists():
        raise InventoryError(f"{path}: no inventory file (run `wattline simulate` or write one; see docs/data-contract.md)")
    try:
        text = path.read_text()
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise InventoryError(" ".join(f"{path}: not valid YAML ({exc})".split())) from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise InventoryError(f"{path}: cannot be read ({exc})") from None
    return parse_inventory(data, str(path), text)


def inventory_yaml(inv: Inventory) -> str:
    return yaml.safe_dump(inv.model_dump(exclude_none=True), sort_keys=False)


def dump_inventory(inv: Inventory, path: Path | str) -> None:
    Path(path).write_text(inventory_yaml(inv))
