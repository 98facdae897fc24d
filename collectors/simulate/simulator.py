"""The orchestration: fleet → workloads (engines, jobs) → per-host power, requests and job events on disk."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from collectors import settings
from collectors.days import write_day_problem
from collectors.inventory import INVENTORY_FILE, Inventory, InventoryError, inventory_yaml
from collectors.simulate import phases, physics, power, traffic, writer
from collectors.simulate.arrivals import Arrivals, poisson_arrivals_s, replay_within
from collectors.simulate.fleets import resolve_fleet
from collectors.simulate.serving_engine import EngineResult, run_engine
from collectors.simulate.training import KIND_NAMES, HostEvents, job_shape, run_job
from collectors.storage import DataRoot

DAY_S = 86_400
DEFAULT_PEAK_RPS = 2.0
DEFAULT_PROMPT_MEDIAN = 1000
DEFAULT_OUTPUT_MEDIAN = 160
STATUS_NAMES = np.array(["ok", "error", "cancelled"])
SHAPES = ("simple", "collector")


@dataclass
class SimulationSummary:
    days: int
    gpus: int
    power_rows: int
    requests: int
    job_events: int
    files: list[Path | str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"simulated {self.days} day(s) of {self.gpus} GPUs: {self.power_rows:,} power rows, "
            f"{self.requests:,} requests, {self.job_events:,} job events in {len(self.files)} files"
        )


def _rng(seed: int, *keys: object) -> np.random.Generator:
    """An independent stream per (seed, entity): stable across runs, processes and fleet order."""
    words = [int.from_bytes(hashlib.sha256(str(k).encode()).digest()[:4], "little") for k in keys]
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def gpu_uuid(seed: int, host: str, gpu: int) -> str:
    digest = hashlib.sha256(f"wattline-sim/{seed}/{host}/{gpu}".encode()).digest()[:16]
    return f"GPU-{uuid.UUID(bytes=digest)}"


@dataclass
class _Endpoint:
    name: str
    tz_offset_h: float
    peak_rps: float
    prompt_median: float
    output_median: float
    traffic: traffic.TrafficProfile
    members: list[tuple[str, list[int]]] = field(default_factory=list)
    spec: dict = field(default_factory=dict)
    gpu: physics.GpuPower = physics.REFERENCE.gpu
    """The GPU model and limit of its first GPU (a replica's GPUs are one model)."""

    def model(self) -> physics.ServingModel:
        return physics.serving_model(self.spec, max(1, self.n_gpus), self.gpu, self.prompt_median, self.output_median)

    @property
    def n_gpus(self) -> int:
        return sum(len(g) for _, g in self.members)


def gpu_power(host) -> dict[int, physics.GpuPower]:
    """Each GPU's model and enforced limit (its own ``power_limit_w``, else the host's, else its TDP)."""
    return {g.index: physics.GpuPower.of(g.model, g.tdp_w, g.power_limit_w or host.power_limit_w) for g in host.gpus}


def workloads(inv: Inventory) -> tuple[dict[str, _Endpoint], dict[str, list[tuple[str, list[int]]]]]:
    """Endpoints and jobs by name: one name spread over several hosts is one set of replicas or one job."""
    endpoints: dict[str, _Endpoint] = {}
    jobs: dict[str, list[tuple[str, list[int]]]] = {}
    for _, _, host in inv.iter_hosts():
        gp = gpu_power(host)
        for e in host.endpoints:
            profile = e.traffic or "conv"
            if profile not in traffic.PROFILES:
                raise InventoryError(f"endpoint {e.name!r}: traffic must be one of {', '.join(traffic.PROFILES)} (got {profile!r})")
            ep = endpoints.setdefault(
                e.name,
                _Endpoint(
                    e.name,
                    e.tz_offset_h,
                    float(e.peak_rps if e.peak_rps is not None else DEFAULT_PEAK_RPS),
                    float(e.prompt_median if e.prompt_median is not None else DEFAULT_PROMPT_MEDIAN),
                    float(e.output_median if e.output_median is not None else DEFAULT_OUTPUT_MEDIAN),
                    traffic.PROFILES[profile],
                    spec=inv.workload_spec("endpoint", e.name),
                    gpu=gp[e.gpus[0]] if e.gpus else physics.REFERENCE.gpu,
                ),
            )
            ep.members.append((host.name, list(e.gpus)))
        for j in host.jobs:
            jobs.setdefault(j.name, []).append((host.name, list(j.gpus)))
    return endpoints, jobs


def endpoint_arrivals(seed: int, ep: _Endpoint, windows: list[tuple[float, float]]) -> tuple[Arrivals, np.random.Generator]:
    """The endpoint's simulated arrivals and the stream its engine continues with."""
    rng = _rng(seed, "endpoint", ep.name)
    t = poisson_arrivals_s(rng, windows, ep.peak_rps, ep.tz_offset_h, ep.traffic.rate_sd)
    return Arrivals(t, *traffic.token_lengths(rng, ep.traffic, len(t), ep.prompt_median, ep.output_median)), rng


def _engine(seed: int, ep: _Endpoint, windows: list[tuple[float, float]], replay: Arrivals | None) -> EngineResult:
    if replay is not None:
        rng = _rng(seed, "endpoint", ep.name)
        arr = replay_within(replay, windows)
    else:
        arr, rng = endpoint_arrivals(seed, ep, windows)
    return run_engine(rng, arr, max(1, ep.n_gpus), model=ep.model(), batching=ep.spec.get("batching") or "continuous",
                      max_batch=ep.spec.get("max_batch"))


@dataclass
class _HostPlan:
    name: str
    gpus: list[int]
    timelines: dict[int, phases.Timeline]
    mem_mib: dict[int, int]
    gpu: dict[int, physics.GpuPower] = field(default_factory=dict)


def _host_power(args: tuple) -> tuple[list[Path | str], int]:
    """All windows of one host, in order, carrying energy counters and temperatures across them."""
    plan, seed, epoch_ns, windows, data_dir, shape = args
    paths: list[Path | str] = []
    rows = 0
    state = {}
    for g in plan.gpus:
        r = _rng(seed, "gpu", plan.name, g)
        state[g] = dict(energy_j=round(float(r.uniform(1e5, 5e8)), 3), gain=float(r.normal(1.0, 0.02)),
                        temp_off=float(r.uniform(-2.5, 2.5)), ema_w=None, end_s=None)
    if shape == "collector":
        return _host_power_collector(plan, seed, epoch_ns, windows, data_dir, state)
    for d, window in enumerate(windows):
        for g in plan.gpus:
            st = state[g]
            if st["end_s"] is not None:
                st["energy_j"] += st["ema_w"] * (window[0] - st["end_s"])
            rec, st["ema_w"] = power.sample_gpu(
                _rng(seed, "power", plan.name, g, d), plan.timelines[g], window, epoch_ns,
                st["energy_j"], plan.mem_mib[g], st["gain"], st["temp_off"], st["ema_w"], plan.gpu[g],
            )
            st["energy_j"] = float(rec.energy_j[-1])
            st["end_s"] = window[1]
            table = writer.power_table(plan.name, g, gpu_uuid(seed, plan.name, g), rec, plan.gpu[g].limit_w)
            rows += table.num_rows
            paths += writer.write(table, data_dir, "power", prefix=f"{writer.PREFIX}-gpu{g:03d}")
    return paths, rows


def _hours(window: tuple[float, float]) -> list[tuple[float, float]]:
    """A window cut at UTC hour boundaries: the collector's files hold one hour each."""
    lo, hi = window
    cuts = [lo] + [h * 3600.0 for h in range(int(lo // 3600) + 1, int(-(-hi // 3600)))] + [hi]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _host_power_collector(plan: _HostPlan, seed: int, epoch_ns: int, windows, data_dir, state) -> tuple[list[Path | str], int]:
    """``--shape collector``: per host and UTC hour one file like a compacted collector hour
    (``nvml-YYYYMMDDTHH-compacted-….parquet``, rows sorted by gpu, source, ts)."""
    paths: list[Path | str] = []
    rows = 0
    for d, window in enumerate(windows):
        for hour in _hours(window):
            gpus = []
            for g in plan.gpus:
                st = state[g]
                if st["end_s"] is not None and hour[0] > st["end_s"]:
                    st["energy_j"] += st["ema_w"] * (hour[0] - st["end_s"])
                buf, fld, st["energy_j"], st["ema_w"] = power.sample_gpu_collector(
                    _rng(seed, "power", plan.name, g, d, hour[0]), plan.timelines[g], hour, epoch_ns,
                    st["energy_j"], plan.mem_mib[g], st["gain"], st["temp_off"], st["ema_w"], plan.gpu[g],
                )
                st["end_s"] = hour[1]
                gpus.append((g, gpu_uuid(seed, plan.name, g), buf, fld, plan.gpu[g].limit_w))
            table = writer.collector_table(plan.name, gpus)
            rows += table.num_rows
            key = dt.datetime.fromtimestamp(epoch_ns / 1e9 + hour[0], dt.UTC).strftime("%Y%m%dT%H")
            tag = hashlib.sha256(f"{seed}/{plan.name}/{key}".encode()).hexdigest()[:6]
            paths += writer.write(table, data_dir, "power", prefix=f"nvml-{key}-compacted-{tag}")
    return paths, rows


def _workers(n_tasks: int) -> int:
    n = settings.load().sim_workers or min(2, os.cpu_count() or 1)
    return max(1, min(n, n_tasks))


def _map(fn, tasks: list, workers: int) -> list:
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, tasks))


def _engine_task(args: tuple) -> EngineResult:
    return _engine(*args)


def simulate(
    data_dir: Path | str,
    *,
    start: dt.date,
    days: int = 1,
    seed: int = 0,
    fleet: str | Path = "demo",
    hours: float | None = None,
    arrivals: dict[str, Arrivals] | None = None,
    shape: str = "simple",
) -> SimulationSummary:
    """Simulate ``days`` days from 00:00 UTC of ``start`` (only the first ``hours`` of each when given).

    Writes ``inventory.yaml`` and the power, requests and job_events datasets under ``data_dir``
    (a local folder or an ``s3://bucket/prefix`` URL); the same arguments always give
    byte-identical files. ``arrivals`` replays a trace per endpoint
    name instead of the diurnal Poisson process. ``shape``: ``simple`` writes one 10 Hz series per
    GPU (``source`` = simulated); ``collector`` writes what ``wattline collect`` writes (the driver's
    ~20 ms buffer rows and 100 ms field rows, one file per host and hour).
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)} (got {shape!r})")
    if days < 1:
        raise ValueError(f"days must be at least 1 (got {days})")
    if hours is not None and not 0 < hours <= 24:
        raise ValueError(f"hours must be in (0, 24] (got {hours})")
    if seed < 0:
        raise ValueError(f"seed must be non-negative (got {seed})")
    inv = resolve_fleet(fleet)
    endpoints, jobs = workloads(inv)
    unknown = sorted(set(arrivals or {}) - set(endpoints))
    if unknown:
        raise ValueError(f"arrivals for unknown endpoint(s) {', '.join(unknown)}; the fleet serves {', '.join(sorted(endpoints))}")
    for day in (start, start + dt.timedelta(days=days - 1)):
        if write_day_problem(day):
            raise ValueError(write_day_problem(day))
    root = DataRoot.open(data_dir)
    if root.is_local:
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
    # else an s3:// URL: stays a string, so worker processes make their own client

    epoch_ns = int(dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC).timestamp()) * 1_000_000_000
    span_s = DAY_S if hours is None else hours * 3600.0
    windows = [(d * DAY_S, d * DAY_S + span_s) for d in range(days)]
    in_window = _window_mask(windows)

    workers = _workers(len(endpoints) + len(inv.gpu_rows()))
    tasks = [(seed, ep, windows, (arrivals or {}).get(name)) for name, ep in endpoints.items()]
    engines = dict(zip(endpoints, _map(_engine_task, tasks, workers), strict=False))
    job_events: dict[str, list[HostEvents]] = {
        name: run_job(_rng(seed, "job", name), [len(g) for _, g in members], windows[-1][1],
                      pp=int(inv.workload_spec("job", name).get("pp") or 1),
                      shape=job_shape(inv.workload_spec("job", name), sum(len(g) for _, g in members)))
        for name, members in jobs.items()
    }

    plans = []
    seen: dict[str, int] = {}
    for _, _, host in inv.iter_hosts():
        gp = gpu_power(host)
        timelines = {g.index: phases.Timeline.constant(phases.IDLE, gp[g.index].spec.idle_w) for g in host.gpus}
        mem = {g.index: power.MEM_IDLE_MIB for g in host.gpus}
        for e in host.endpoints:
            for g in e.gpus:
                k = seen[e.name] = seen.get(e.name, -1) + 1  # the endpoint's k-th GPU: its replica
                timelines[g], mem[g] = engines[e.name].timeline_of(k), power.MEM_INFERENCE_MIB
        for j in host.jobs:
            h = [m[0] for m in jobs[j.name]].index(host.name)
            for g in j.gpus:
                timelines[g], mem[g] = job_events[j.name][h].timeline.on(gp[g]), power.MEM_TRAINING_MIB
        plans.append(_HostPlan(host.name, [g.index for g in host.gpus], timelines, mem, gp))

    files: list[Path | str] = []
    power_rows = 0
    for paths, rows in _map(_host_power, [(p, seed, epoch_ns, windows, data_dir, shape) for p in plans], workers):
        files += paths
        power_rows += rows

    n_requests = 0
    if endpoints:
        req = _request_columns(engines)
        n_requests = len(req["request_id"])
        files += writer.write(writer.requests_table(epoch_ns, req), data_dir, "requests", sort_by=["endpoint", "arrival_ts"])
    n_events = 0
    if jobs:
        ev = _event_columns(jobs, job_events, in_window)
        n_events = len(ev["job"])
        files += writer.write(writer.job_events_table(epoch_ns, ev), data_dir, "job_events", sort_by=["job", "host", "start_ts"])
    # Last, and atomically: a simulation that fails midway leaves the previous inventory, which
    # still describes the data that was there (the next run must not compute against a new one).
    root.write_bytes(INVENTORY_FILE, inventory_yaml(inv).encode())
    return SimulationSummary(days, len(inv.gpu_rows()), power_rows, n_requests, n_events, files)


def _window_mask(windows: list[tuple[float, float]]):
    lo = np.array([w[0] for w in windows])
    hi = np.array([w[1] for w in windows])

    def mask(t_s: np.ndarray) -> np.ndarray:
        i = np.searchsorted(lo, t_s, side="right") - 1
        return (i >= 0) & (t_s < hi[np.maximum(i, 0)])

    return mask


def _request_columns(engines: dict[str, EngineResult]) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {
        k: [] for k in ("request_id", "endpoint", "arrival_s", "prefill_start_s", "first_token_s", "end_s", "prompt_tokens", "output_tokens", "status")
    }
    for name, r in engines.items():
        n = len(r.arrival_s)
        cols["request_id"].append(np.array([f"{name}-{i:08d}" for i in range(n)], dtype=object))
        cols["endpoint"].append(np.full(n, name, dtype=object))
        cols["arrival_s"].append(r.arrival_s)
        cols["prefill_start_s"].append(r.prefill_start_s)
        cols["first_token_s"].append(r.first_token_s)
        cols["end_s"].append(r.end_s)
        cols["prompt_tokens"].append(r.prompt_tokens)
        cols["output_tokens"].append(r.output_tokens)
        cols["status"].append(STATUS_NAMES[r.status].astype(object))
    return {k: np.concatenate(v) for k, v in cols.items()}


def _event_columns(jobs: dict, job_events: dict[str, list[HostEvents]], in_window) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {k: [] for k in ("job", "host", "step", "kind", "start_s", "end_s", "tokens")}
    kind_names = np.array([KIND_NAMES.get(k, "") for k in range(len(phases.NAMES))], dtype=object)
    for name, members in jobs.items():
        for (host, _), ev in zip(members, job_events[name], strict=False):
            m = in_window(ev.start_s)
            n = int(m.sum())
            cols["job"].append(np.full(n, name, dtype=object))
            cols["host"].append(np.full(n, host, dtype=object))
            cols["step"].append(ev.step[m])
            cols["kind"].append(kind_names[ev.kind[m]])
            cols["start_s"].append(ev.start_s[m])
            cols["end_s"].append(ev.end_s[m])
            cols["tokens"].append(ev.tokens[m])
    return {k: np.concatenate(v) for k, v in cols.items()}
