"""The fleet inventory (``inventory.yaml`` at the data dir root): fleets → clusters → hosts → GPUs,
the endpoints and jobs on them (with the model they serve or train), and an optional Kubernetes
label mapping.

Validated with pydantic on load, so a typo names the bad key and its place in the file
(``inventory.yaml: fleets[0].clusters[1].hosts[0].name (line 12): ...``). Every key is known: an
unknown one is an error naming the closest known key, so a misspelt optional key (``parms_b``)
is never silently ignored. Host and cluster names become path segments and follow the rule of
:mod:`collectors.names`; cluster names, host names, a host's GPU indices and GPU UUIDs are
unique; a GPU belongs to at most one job or endpoint; every number is finite (``.inf`` and
``.nan`` are YAML floats). The schema is described in docs/data-contract.md.
"""

from __future__ import annotations

import datetime
import difflib
import fnmatch
import typing
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

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
    # extra="forbid": a misspelt optional key (`parms_b`) would otherwise be dropped without a word.
    # allow_inf_nan=False: `tdp_w: .inf` would pass `gt=0` and make every share of it zero.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _path_name(value: str) -> str:
    """Host and cluster names become path segments (collectors/names.py)."""
    problem = path_name_problem(value)
    if problem:
        raise ValueError(f"name {value!r} {problem}; names used in paths allow {PATH_NAME_RULE}")
    return value


def _one_of(what: str, value: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{what} must be one of {', '.join(allowed)} (got {value!r}){hint}")


PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "mxfp8", "mxfp6", "mxfp4", "nvfp4", "int8", "int4")
"""Number formats of a model's weights (and activations) that later work turns into bytes per parameter;
written in any case (``BF16`` reads as ``bf16``)."""
TRAFFIC_PROFILES = ("conv", "code")
"""The simulator's traffic profiles (``collectors.simulate.traffic.PROFILES``; the core imports nothing of ours)."""
BATCHING_POLICIES = ("continuous", "static")
"""How an endpoint's engine batches requests: ``continuous`` admits each request between decode steps
(vLLM, SGLang); ``static`` runs one padded batch to its end before forming the next."""
KUBERNETES_LABELS = ("pod", "namespace", "container")
"""dcgm-exporter's Kubernetes labels (its pod-resources mapping): which pod holds a GPU."""
_PROMETHEUS_LABEL = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Gpu(_Strict):
    index: int = Field(ge=0, le=255)
    tdp_w: float = Field(gt=0)
    model: str | None = None
    uuid: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^\S+$")
    """NVML's UUID (``GPU-…``; dcgm-exporter's ``UUID`` label): the board itself, wherever it is."""
    power_limit_w: float | None = Field(default=None, gt=0)
    """The enforced power limit, when it is not the TDP; unset: unknown."""


class _Workload(_Strict):
    """What runs on some of a host's GPUs. One name on several hosts is one endpoint or job."""

    name: str
    gpus: list[int]
    tz_offset_h: float = 0.0
    model: str | None = None
    """The served or trained model, free-form (``meta-llama/Llama-3.1-70B-Instruct``)."""
    params_b: float | None = Field(default=None, gt=0)
    active_params_b: float | None = Field(default=None, gt=0)
    """Parameters active per token (mixture of experts), billions."""
    precision: str | None = None
    tp: int | None = Field(default=None, ge=1, le=4096)
    pp: int | None = Field(default=None, ge=1, le=4096)
    engine: str | None = None
    """The serving or training engine, free-form (``vllm``, ``sglang``, ``megatron``)."""

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_known(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip().lower()
            if value not in PRECISIONS:
                _one_of("precision", value, PRECISIONS)
        return value

    @model_validator(mode="after")
    def _active_within_total(self) -> _Workload:
        if self.active_params_b is not None and self.params_b is not None and self.active_params_b > self.params_b:
            raise _At(("active_params_b",), f"active_params_b {self.active_params_b:g} is more than params_b {self.params_b:g}")
        return self

    @property
    def gpus_per_replica(self) -> int | None:
        """tp × pp (a missing one of the two is 1); None when neither is given: unknown, not guessed."""
        if self.tp is None and self.pp is None:
            return None
        return (self.tp or 1) * (self.pp or 1)


class Endpoint(_Workload):
    peak_rps: float | None = Field(default=None, gt=0)
    """Simulator: arrival rate at the local-time peak (requests/s)."""
    prompt_median: float | None = Field(default=None, gt=0)
    output_median: float | None = Field(default=None, gt=0)
    """Simulator: median prompt and output lengths (tokens)."""
    traffic: str | None = None
    """Simulator: whose Azure 2023 length distributions and burstiness the endpoint follows."""
    batching: str | None = None
    """Simulator: the engine's batching policy (``BATCHING_POLICIES``; default continuous)."""
    max_batch: int | None = Field(default=None, ge=1, le=100_000)
    """Simulator: the most requests in one static batch, or running at once under continuous batching."""

    @field_validator("traffic")
    @classmethod
    def _traffic_known(cls, value: str | None) -> str | None:
        if value is not None and value not in TRAFFIC_PROFILES:
            _one_of("traffic", value, TRAFFIC_PROFILES)
        return value

    @field_validator("batching")
    @classmethod
    def _batching_known(cls, value: str | None) -> str | None:
        if value is not None and value not in BATCHING_POLICIES:
            _one_of("batching", value, BATCHING_POLICIES)
        return value


class Job(_Workload):
    dp: int | None = Field(default=None, ge=1, le=1_000_000)
    """Data-parallel degree over all the job's GPUs (on every host): its GPUs = tp × pp × dp."""

    @model_validator(mode="after")
    def _fits_its_world(self) -> Job:
        world = self.dp * self.gpus_per_replica if self.dp is not None and self.gpus_per_replica else None
        if world is not None and len(self.gpus) > world:  # one host can tell no more than this
            raise _At(("dp",), f"job {self.name!r} has {len(self.gpus)} GPU(s) on this host, more than "
                      f"tp × pp × dp = {world} in the whole job")
        return self


WORKLOAD_KEYS = ("model", "params_b", "active_params_b", "precision", "tp", "pp", "engine", "dp",
                 "peak_rps", "prompt_median", "output_median", "traffic", "batching", "max_batch")
"""Keys of the endpoint or job as a whole: given on one of its hosts, they hold on all; given on several, they agree."""


class Host(_Strict):
    name: str
    role: Literal["training", "inference"]
    gpus: list[Gpu] = Field(min_length=1)
    provisioned_w: float | None = Field(default=None, gt=0)
    power_limit_w: float | None = Field(default=None, gt=0)
    """The enforced power limit of each of its GPUs that does not set its own."""
    jobs: list[Job] = []
    endpoints: list[Endpoint] = []

    _name_is_a_path_name = field_validator("name")(_path_name)

    @model_validator(mode="after")
    def _assignments_name_known_gpus(self) -> Host:
        indices = [g.index for g in self.gpus]
        for j, i in enumerate(indices):
            if i in indices[:j]:  # would count the GPU's TDP twice in provisioned power
                raise _At(("gpus", j, "index"), f"host {self.name!r} lists GPU index {i} more than once")
        known = set(indices)
        items: list[tuple[str, list[_Workload]]] = [("job", list(self.jobs)), ("endpoint", list(self.endpoints))]
        for kind, workloads in items:
            for k, a in enumerate(workloads):
                missing = sorted(set(a.gpus) - known)
                if missing:
                    raise _At((f"{kind}s", k), f"{a.name!r} uses GPU(s) {missing} that host {self.name!r} does not list")
        return self

    def owners(self) -> dict[int, list[tuple[str, str, float]]]:
        """GPU index → the (kind, name, tz_offset_h) of every job and endpoint that lists it. One is
        the GPU's owner by default; a GPU listed by several is held by one of them at a time, as the
        assignments say (docs/data-contract.md#assignments), and by none by default."""
        owner: dict[int, list[tuple[str, str, float]]] = {}
        items: list[tuple[str, list[_Workload]]] = [("job", list(self.jobs)), ("endpoint", list(self.endpoints))]
        for kind, workloads in items:
            for a in workloads:
                for g in a.gpus:
                    if (kind, a.name, a.tz_offset_h) not in owner.setdefault(g, []):
                        owner[g].append((kind, a.name, a.tz_offset_h))
        return owner

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


class KubernetesLabels(_Strict):
    """The Prometheus label names that carry each Kubernetes field (dcgm-exporter's defaults)."""

    pod: str = Field(default="pod", pattern=_PROMETHEUS_LABEL)
    namespace: str = Field(default="namespace", pattern=_PROMETHEUS_LABEL)
    container: str = Field(default="container", pattern=_PROMETHEUS_LABEL)


class KubernetesMatch(_Strict):
    """Glob patterns (``*``, ``?``, ``[…]``, case-sensitive) on the label values; all given must match."""

    pod: str | None = Field(default=None, min_length=1)
    namespace: str | None = Field(default=None, min_length=1)
    container: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _not_empty(self) -> KubernetesMatch:
        if self.pod is None and self.namespace is None and self.container is None:
            raise ValueError(f"match needs at least one of {', '.join(KUBERNETES_LABELS)}")
        return self

    def matches(self, values: dict[str, str | None]) -> bool:
        patterns = ((k, getattr(self, k)) for k in KUBERNETES_LABELS)
        return all(values.get(k) is not None and fnmatch.fnmatchcase(str(values[k]), p) for k, p in patterns if p is not None)


class KubernetesRule(_Strict):
    match: KubernetesMatch
    endpoint: str | None = None
    job: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> KubernetesRule:
        if (self.endpoint is None) == (self.job is None):
            raise ValueError("a rule names exactly one of endpoint or job")
        return self


class Kubernetes(_Strict):
    """Which endpoint or job a GPU serves, from the pod that holds it: the first rule that matches wins."""

    labels: KubernetesLabels = KubernetesLabels()
    rules: list[KubernetesRule] = []

    def workload_for(self, labels: dict[str, str]) -> tuple[str, str] | None:
        """(``endpoint`` or ``job``, its name) for a series' labels, or None when no rule matches."""
        values = {k: labels.get(getattr(self.labels, k)) for k in KUBERNETES_LABELS}
        for rule in self.rules:
            if rule.match.matches(values):
                return ("endpoint", rule.endpoint) if rule.endpoint is not None else ("job", str(rule.job))
        return None


class TimedAssignment(_Strict):
    """A GPU held by one endpoint or job over [from_ts, to_ts) (an end left out: open). The GPU is
    ``host`` and ``gpu`` (its index), or its ``uuid``."""

    host: str | None = None
    gpu: int | None = Field(default=None, ge=0, le=255)
    uuid: str | None = Field(default=None, min_length=1, max_length=128)
    endpoint: str | None = None
    job: str | None = None
    from_ts: datetime.datetime | None = None
    to_ts: datetime.datetime | None = None

    @model_validator(mode="after")
    def _well_formed(self) -> TimedAssignment:
        if (self.endpoint is None) == (self.job is None):
            raise ValueError("an assignment names exactly one of endpoint or job")
        if self.uuid is None and (self.host is None or self.gpu is None):
            raise ValueError("an assignment names its GPU: host and gpu, or uuid")
        if self.from_ts is not None and self.to_ts is not None and utc(self.to_ts) <= utc(self.from_ts):
            raise ValueError(f"to_ts {self.to_ts.isoformat()} is not after from_ts {self.from_ts.isoformat()}")
        return self


class GpuPlaceConflict(ValueError):
    """Two different GPUs of one import would be stored as one (host, gpu)."""


class GpuPlaces:
    """Where an importer stores a source's GPU: a GPU whose UUID the inventory knows goes to the
    inventory's (host, gpu), whatever the source's host and index labels say (a Kubernetes node name,
    an index renumbered by CUDA_VISIBLE_DEVICES); any other GPU keeps the source's labels. One
    resolver for power rows and assignments alike, so that the two meet on the same GPU.

    Counts distinct source GPUs (host label, index, UUID) placed by UUID and those that kept their
    labels. Two UUIDs stored as one (host, gpu) where the inventory places either are a
    :class:`GpuPlaceConflict`; one UUID seen under several labels (a renamed node) is one board and
    goes to its one place; a row without a UUID keeps its labels."""

    def __init__(self, inventory: Inventory | None) -> None:
        self.inventory = inventory
        self.by_uuid: set[tuple[str, int, str]] = set()
        self.kept: set[tuple[str, int, str | None]] = set()
        self._held: dict[tuple[str, int], tuple[str, str, bool]] = {}
        self._seen: dict[tuple[str, int, str | None], tuple[str, int]] = {}

    def place(self, host: str, gpu: int, uuid: str | None) -> tuple[str, int]:
        """The (host, gpu) a source's GPU is stored under."""
        key = (host, gpu, uuid)
        known = self._seen.get(key)
        if known is not None:
            return known
        found = self.inventory.place_of_uuid(uuid) if self.inventory is not None else None
        place = found or (host, gpu)
        if uuid is not None:  # two boards (UUIDs) in one place, the inventory's for one of them: which is it?
            what = f"GPU {gpu} of host {host!r} (uuid {uuid!r})"
            held = self._held.setdefault(place, (uuid.casefold(), what, found is not None))
            if held[0] != uuid.casefold() and (found is not None or held[2]):
                raise GpuPlaceConflict(f"{what} and {held[1]} would both be stored as GPU {place[1]} of host "
                                       f"{place[0]!r}, where the inventory puts one of them: give each its uuid in "
                                       "inventory.yaml")
        if found is not None and uuid is not None:
            self.by_uuid.add((host, gpu, uuid))
        else:
            self.kept.add(key)
        self._seen[key] = place
        return place

    def by_uuid_place(self, host: str, gpu: int, uuid: str | None) -> bool:
        """Whether this source GPU was placed by its UUID."""
        return uuid is not None and (host, gpu, uuid) in self.by_uuid

    def summary(self, labels: str = "host and index labels") -> str:
        """How many GPUs the inventory placed by UUID, and how many kept the source's labels."""
        moved = sorted({f"{h}/{g} → {p[0]}/{p[1]}" for h, g, u in self.by_uuid
                        for p in [self._seen[(h, g, u)]] if (h, g) != p})
        placed = {u.casefold() for _, _, u in self.by_uuid}
        kept = {(h, g) for h, g, _ in self.kept} - {(h, g) for h, g, _ in self.by_uuid}
        text = f"GPUs: {len(placed)} matched by UUID to the inventory's host and index"
        if moved:
            text += f" ({', '.join(moved[:3])}{', ...' if len(moved) > 3 else ''})"
        return text + f", {len(kept)} kept the source's {labels}" + ("" if self.inventory else " (no inventory.yaml)")


def utc(t: datetime.datetime) -> datetime.datetime:
    """An aware instant in UTC; a naive one is read as UTC (as the data contract reads naive timestamps)."""
    return t.replace(tzinfo=datetime.UTC) if t.tzinfo is None else t.astimezone(datetime.UTC)


class Inventory(_Strict):
    fleets: list[Fleet] = Field(min_length=1)
    kubernetes: Kubernetes | None = None
    assignments: list[TimedAssignment] = []
    """Timed assignments written in the inventory: they override the hosts' lists for their GPU and time."""

    _specs: dict[tuple[str, str], dict] = PrivateAttr(default_factory=dict)
    """(kind, name) → the keys of that endpoint or job as a whole, gathered from all its hosts."""
    _uuid_places: dict[str, tuple[str, int]] = PrivateAttr(default_factory=dict)
    """A GPU's UUID (casefolded) → its (host, gpu index)."""

    @model_validator(mode="after")
    def _names_unique(self) -> Inventory:
        clusters: set[str] = set()
        hosts: set[str] = set()
        uuids: dict[str, str] = {}
        for f, fleet in enumerate(self.fleets):
            for c, cluster in enumerate(fleet.clusters):  # cluster names are partition keys and folder names
                if cluster.name in clusters:
                    raise _At(("fleets", f, "clusters", c, "name"), f"cluster name {cluster.name!r} appears twice")
                clusters.add(cluster.name)
                for h, host in enumerate(cluster.hosts):
                    if host.name in hosts:
                        raise _At(("fleets", f, "clusters", c, "hosts", h, "name"), f"host name {host.name!r} appears twice")
                    hosts.add(host.name)
                    for g, gpu in enumerate(host.gpus):  # a UUID is one board: two places for it is a mistake
                        if gpu.uuid is None:
                            continue
                        here = f"GPU {gpu.index} of host {host.name!r}"
                        if gpu.uuid.casefold() in uuids:
                            raise _At(("fleets", f, "clusters", c, "hosts", h, "gpus", g, "uuid"),
                                      f"uuid {gpu.uuid!r} of {here} is also {uuids[gpu.uuid.casefold()]}'s")
                        uuids[gpu.uuid.casefold()] = here
                        self._uuid_places[gpu.uuid.casefold()] = (host.name, gpu.index)
        self._specs = self._gather_specs()
        self._kubernetes_names_known()
        self._assignments_known()
        return self

    def _assignments_known(self) -> None:
        for a, item in enumerate(self.assignments):
            kind = "endpoint" if item.endpoint is not None else "job"
            name = str(item.endpoint if item.endpoint is not None else item.job)
            if (kind, name) not in self._specs:
                raise _At(("assignments", a, kind), f"no {kind} named {name!r} in the inventory")
            if self.resolve_gpu(item.host, item.gpu, item.uuid) is None:
                what = f"uuid {item.uuid!r}" if item.uuid is not None and item.host is None else f"GPU {item.gpu} of host {item.host!r}"
                raise _At(("assignments", a), f"{what} is not in the inventory")

    def resolve_gpu(self, host: str | None, gpu: int | None, uuid: str | None) -> tuple[str, int] | None:
        """(host, gpu index) of a GPU named by its place or its UUID (both given: they must agree);
        None when the inventory has no such GPU."""
        if uuid is not None:
            found = self.place_of_uuid(uuid)
            if found is None or (host is not None and (host, gpu) != found):
                return None
            return found
        return next(((h.name, g.index) for _, _, h in self.iter_hosts() if h.name == host for g in h.gpus if g.index == gpu), None)

    def place_of_uuid(self, uuid: str | None) -> tuple[str, int] | None:
        """(host, gpu index) of the GPU the inventory gives this UUID, or None."""
        return None if uuid is None else self._uuid_places.get(uuid.casefold())

    def timed_assignment_rows(self) -> list[dict]:
        """The inventory's own ``assignments:`` as rows of the assignments dataset (source ``inventory``)."""
        rows = []
        for item in self.assignments:
            host, gpu = self.resolve_gpu(item.host, item.gpu, item.uuid) or (item.host, item.gpu)
            kind = "endpoint" if item.endpoint is not None else "job"
            rows.append(dict(host=host, gpu=gpu, gpu_uuid=item.uuid, kind=kind, name=item.endpoint or item.job,
                             from_ts=None if item.from_ts is None else utc(item.from_ts),
                             to_ts=None if item.to_ts is None else utc(item.to_ts), source="inventory"))
        return rows

    def _gather_specs(self) -> dict[tuple[str, str], dict]:
        specs: dict[tuple[str, str], dict] = {}
        where: dict[tuple[str, str, str], str] = {}
        gpus: dict[tuple[str, str], int] = {}
        first: dict[tuple[str, str], tuple] = {}
        for f, fleet in enumerate(self.fleets):
            for c, cluster in enumerate(fleet.clusters):
                for h, host in enumerate(cluster.hosts):
                    items: list[tuple[str, list[_Workload]]] = [("job", list(host.jobs)), ("endpoint", list(host.endpoints))]
                    for kind, workloads in items:
                        for k, w in enumerate(workloads):
                            loc = ("fleets", f, "clusters", c, "hosts", h, f"{kind}s", k)
                            spec = specs.setdefault((kind, w.name), {})
                            first.setdefault((kind, w.name), loc)
                            gpus[(kind, w.name)] = gpus.get((kind, w.name), 0) + len(w.gpus)
                            for key in sorted(w.model_fields_set & set(WORKLOAD_KEYS)):
                                value = getattr(w, key)
                                if value is None:
                                    continue
                                if key in spec and spec[key] != value:
                                    raise _At(loc + (key,), f"{kind} {w.name!r} has {key} {value!r} on host {host.name!r} and "
                                              f"{spec[key]!r} on host {where[(kind, w.name, key)]!r}; one {kind} is one "
                                              "engine: give it one value (or on one host only)")
                                spec[key] = value
                                where[(kind, w.name, key)] = host.name
        for (kind, name), spec in specs.items():
            if kind != "endpoint" or ("tp" not in spec and "pp" not in spec):
                continue
            per_replica = spec.get("tp", 1) * spec.get("pp", 1)
            if gpus[(kind, name)] % per_replica:  # replicas are whole: tp × pp GPUs each
                key = "tp" if "tp" in spec else "pp"
                raise _At(first[(kind, name)] + (key,), f"endpoint {name!r} has {gpus[(kind, name)]} GPU(s), not a "
                          f"multiple of tp × pp = {per_replica} (the GPUs of one replica)")
        return specs

    def _kubernetes_names_known(self) -> None:
        if self.kubernetes is None:
            return
        for r, rule in enumerate(self.kubernetes.rules):
            kind = "endpoint" if rule.endpoint is not None else "job"
            name = str(rule.endpoint if rule.endpoint is not None else rule.job)
            if (kind, name) not in self._specs:
                names = sorted(n for k, n in self._specs if k == kind)
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise _At(("kubernetes", "rules", r, kind), f"no {kind} named {name!r} in the inventory{hint}")

    def workload_spec(self, kind: Literal["endpoint", "job"], name: str) -> dict:
        """The keys of endpoint or job ``name`` as a whole (those given on any of its hosts)."""
        return dict(self._specs.get((kind, name), {}))

    def iter_hosts(self):
        for fleet in self.fleets:
            for cluster in fleet.clusters:
                for host in cluster.hosts:
                    yield fleet, cluster, host

    def gpu_rows(self) -> list[dict]:
        """One row per GPU with everything the analytics join on (the ``inventory_gpus`` table)."""
        rows = []
        for fleet, cluster, host in self.iter_hosts():
            owner = {g: o[0] for g, o in host.owners().items() if len(o) == 1}
            for gpu in host.gpus:
                kind, name, tz = owner.get(gpu.index, (None, None, 0.0))
                limit = gpu.power_limit_w if gpu.power_limit_w is not None else host.power_limit_w
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
                        uuid=gpu.uuid,
                        power_limit_w=None if limit is None else float(limit),
                    )
                )
        return rows

    def workload_rows(self, kind: Literal["endpoint", "job"]) -> list[dict]:
        """One row per endpoint (or job) and host it runs on (the ``inventory_endpoints`` and
        ``inventory_jobs`` tables): its GPUs there and the keys of the whole endpoint or job."""
        rows = []
        for fleet, cluster, host in self.iter_hosts():
            for w in host.endpoints if kind == "endpoint" else host.jobs:
                spec = self.workload_spec(kind, w.name)
                tp, pp = spec.get("tp"), spec.get("pp")
                row = dict(fleet=fleet.name, cluster=cluster.name, host=host.name, **{kind: w.name}, gpus=len(w.gpus),
                           model=spec.get("model"), params_b=spec.get("params_b"),
                           active_params_b=spec.get("active_params_b"), precision=spec.get("precision"), tp=tp, pp=pp)
                if kind == "job":
                    row["dp"] = spec.get("dp")
                row.update(gpus_per_replica=None if tp is None and pp is None else (tp or 1) * (pp or 1),
                           engine=spec.get("engine"), tz_offset_h=w.tz_offset_h)
                rows.append(row)
        return rows


def _where(loc: tuple) -> str:
    """``fleets[0].clusters[1].name`` from pydantic's ``('fleets', 0, 'clusters', 1, 'name')``."""
    text = ""
    for p in loc:
        text += f"[{p}]" if isinstance(p, int) else f".{p}" if text else str(p)
    return text or "(top level)"


def _line_of(node, loc: tuple) -> int | None:
    """The 1-based line of ``loc`` in a composed YAML document: the deepest node found, and for a
    mapping's entry its key's line (a key whose value is a block is found where it is written)."""
    line = None
    for p in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(p)), None)
            if pair is None:
                return line
            line, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
            node = node.value[p]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model that validates the mapping at ``loc`` (None where it is no model)."""
    model: object = Inventory
    for p in loc:
        if isinstance(p, int):
            continue  # a list's item: the list's item type is already taken
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or p not in model.model_fields:
            return None
        model = model.model_fields[p].annotation
        while typing.get_origin(model) is not None:  # list[X], X | None → X
            model = next((a for a in typing.get_args(model) if a is not type(None)), None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unknown_key(loc: tuple) -> str:
    """``unknown key 'parms_b'; did you mean 'params_b'?`` from the keys the place allows."""
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model else []
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]!r}?"
    return f"unknown key {key!r}; known keys here: {', '.join(known)}" if known else f"unknown key {key!r}"


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: same results, faster


def parse_inventory(data: object, source: str = "inventory", text: str | None = None) -> Inventory:
    """Validate ``data``; ``text`` (the YAML it was read from) lets an error give its line."""
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        document = yaml.compose(text, Loader=_LOADER) if text is not None else None
        errors = exc.errors()
        # an unknown key first: a misspelt required key also shows as that key missing
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, _At):
            loc += cause.loc
        line = _line_of(document, loc) if document is not None else None
        at = f" (line {line})" if line else ""
        msg = _unknown_key(loc) if err["type"] == "extra_forbidden" and loc else err["msg"].removeprefix("Value error, ")
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
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
