"""The fleet inventory (``inventory.yaml`` at the data dir root): fleets → clusters → hosts → GPUs.

Validated with pydantic on load, so a typo names the bad key and its place in the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class InventoryError(ValueError):
    """The inventory file is missing or does not follow the documented shape."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


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

    @model_validator(mode="after")
    def _assignments_name_known_gpus(self) -> "Host":
        known = {g.index for g in self.gpus}
        for a in [*self.jobs, *self.endpoints]:
            missing = sorted(set(a.gpus) - known)
            if missing:
                raise ValueError(f"{a.name!r} uses GPU(s) {missing} that host {self.name!r} does not list")
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

    @property
    def effective_provisioned_w(self) -> float:
        return self.provisioned_w or sum(h.tdp_sum_w for h in self.hosts)


class Fleet(_Strict):
    name: str
    clusters: list[Cluster] = Field(min_length=1)


class Inventory(_Strict):
    fleets: list[Fleet] = Field(min_length=1)

    @model_validator(mode="after")
    def _host_names_unique(self) -> "Inventory":
        seen: set[str] = set()
        for _, _, host in self.iter_hosts():
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} appears twice")
            seen.add(host.name)
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
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_inventory(data: object, source: str = "inventory") -> Inventory:
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise InventoryError(f"{source}: {_where(err['loc'])}: {err['msg']}{more}") from None


def load_inventory(path: Path | str) -> Inventory:
    path = Path(path)
    if not path.exists():
        raise InventoryError(f"{path}: no inventory file (run `wattline simulate` or write one; see docs/data-contract.md)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not valid YAML ({exc})") from None
    return parse_inventory(data, str(path))


def inventory_yaml(inv: Inventory) -> str:
    return yaml.safe_dump(inv.model_dump(exclude_none=True), sort_keys=False)


def dump_inventory(inv: Inventory, path: Path | str) -> None:
    Path(path).write_text(inventory_yaml(inv))
