"""Import NVIDIA dcgm-exporter metrics from a Prometheus server into the ``power`` dataset.

What is read (dcgm-exporter's default counters): ``DCGM_FI_DEV_POWER_USAGE`` (gauge, W: the
driver's power reading, a 1 s average on Ampere and newer) and, when present,
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (counter, mJ since driver load). Series are told apart by
the labels ``Hostname`` (the host) and ``gpu`` (its index); ``UUID`` and ``modelName`` are kept
when present. The host label's value becomes a path segment, so it must follow
``collectors.names``'s rule.

How: ``/api/v1/query_range`` at ``step`` (Prometheus holds each scrape's value until the next, so
the rows are the scraped series sampled on the step grid), in chunks of at most 11,000 points per
series (Prometheus refuses larger ranges). Every chunk is fetched before anything is written, so
a failure (unreachable server, bad query) writes nothing; the files are then named from the
query, so importing the same range again replaces them instead of adding rows.

Rows: ``power_avg_w`` = the gauge, ``power_w`` null, ``source = 'dcgm'``, ``energy_j`` = the
counter in J (null where there is none). A drop of the counter is a reset (driver reload): it is
counted, and the per-GPU energy in the summary adds the increases around it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from collectors.contract import POWER, TS
from collectors.gpu_specs import KNOWN_TDP_W
from collectors.names import BadName, check_path_name
from collectors.parquet_sink import write_dataset
from collectors.storage import DataRoot

POWER_METRIC = "DCGM_FI_DEV_POWER_USAGE"
ENERGY_METRIC = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
SOURCE = "dcgm"
MAX_POINTS = 11_000
"""Prometheus's limit on points per series in one range query."""
MAX_POWER_W = 5000.0


class PrometheusError(ValueError):
    """Something the user can fix (URL, metric, labels, range): one line."""


@dataclass
class Series:
    host: str
    gpu: int
    uuid: str | None = None
    model: str | None = None
    # per chunk, then (finish()) one sorted array without repeated timestamps
    t_ms: list | np.ndarray = field(default_factory=list)
    power_avg_w: list | np.ndarray = field(default_factory=list)
    energy_t_ms: list | np.ndarray = field(default_factory=list)
    energy_mj: list | np.ndarray = field(default_factory=list)

    def finish(self) -> None:
        """Chunks joined; several series of one GPU (a pod label that changed) give one value per
        timestamp (the first seen)."""
        self.t_ms, self.power_avg_w = _joined(self.t_ms, self.power_avg_w)
        self.energy_t_ms, self.energy_mj = _joined(self.energy_t_ms, self.energy_mj)


@dataclass
class ImportResult:
    rows: int = 0
    chunks: int = 0
    gpus: dict = field(default_factory=dict)  # (host, gpu) -> Series
    skipped: dict = field(default_factory=dict)  # reason -> count
    resets: int = 0
    scrape_interval_s: float | None = None  # median over series, from count_over_time
    step_s: float = 1.0
    written: list = field(default_factory=list)

    def energy_j(self, key) -> float | None:
        """Energy of one GPU from its counter (increases only: a drop is a reset)."""
        s = self.gpus[key]
        if len(s.energy_mj) < 2:
            return None
        d = np.diff(s.energy_mj)
        return float(np.where(d >= 0, d, 0.0).sum()) / 1000.0

    def summary(self) -> str:
        hosts = sorted({h for h, _ in self.gpus})
        with_energy = [k for k in self.gpus if self.energy_j(k) is not None]
        energy = sum(self.energy_j(k) for k in with_energy)
        skipped = "; ".join(f"{k}: {n}" for k, n in sorted(self.skipped.items()))
        return (f"imported {self.rows} power row(s) (source {SOURCE}) for {len(self.gpus)} GPU(s) on "
                f"{len(hosts)} host(s) ({', '.join(hosts[:5])}{', ...' if len(hosts) > 5 else ''}) "
                f"in {self.chunks} query chunk(s)"
                + (f"; energy counter on {len(with_energy)} GPU(s): {energy / 3.6e6:.4f} kWh"
                   + (f", {self.resets} counter reset(s) skipped" if self.resets else "") if with_energy else
                   "; no energy counter")
                + (f"; skipped {skipped}" if skipped else "")
                + (f"; scrape interval ≈ {self.scrape_interval_s:.3g} s" if self.scrape_interval_s else ""))

    def coarse_warning(self) -> str | None:
        """Scrapes slower than the step repeat each value: say which answers that leaves out."""
        if not self.scrape_interval_s or self.scrape_interval_s <= 1.5 * self.step_s:
            return None
        return (f"Prometheus scraped every ≈ {self.scrape_interval_s:.3g} s, so each value repeats over "
                f"{self.scrape_interval_s / self.step_s:.0f} step(s): swings over windows shorter than "
                f"{2 * self.scrape_interval_s:.3g} s and request phases cannot be read from these rows "
                "(docs/connect.md#what-each-source-can-answer)")


class Client:
    """The two HTTP API calls the importer needs, with one-line errors."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusError(f"--url {url!r}: expected http://HOST:PORT of a Prometheus server")
        self.base = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, params: list[tuple[str, str]]):
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.base}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                doc = json.loads(body)
            except ValueError:
                raise PrometheusError(f"{self.base}{path}: HTTP {exc.code} ({exc.reason}); is this a Prometheus server?") from None
            raise PrometheusError(f"Prometheus at {self.base}: {doc.get('errorType', 'error')}: {doc.get('error', '')}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusError(f"cannot reach Prometheus at {self.base} ({reason})") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.base}{path}: the answer is not JSON; is this a Prometheus server?") from None
        if doc.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.base}: {doc.get('errorType', 'error')}: {doc.get('error', '')}")
        return doc["data"]

    def query_range(self, query: str, start_s: float, end_s: float, step_s: float):
        data = self.get("/api/v1/query_range", [("query", query), ("start", _fmt(start_s)), ("end", _fmt(end_s)),
                                                ("step", _fmt(step_s))])
        return data.get("result", [])

    def query(self, query: str, at_s: float):
        return self.get("/api/v1/query", [("query", query), ("time", _fmt(at_s))]).get("result", [])

    def series(self, metric: str, start_s: float, end_s: float) -> list[dict]:
        return self.get("/api/v1/series", [("match[]", metric), ("start", _fmt(start_s)), ("end", _fmt(end_s))])


def _fmt(seconds: float) -> str:
    return f"{seconds:.3f}"


def chunks(start_s: float, end_s: float, step_s: float, max_points: int = MAX_POINTS):
    """[a, b] ranges on the grid start + k·step covering [start, end], each ≤ max_points points."""
    span = step_s * (max_points - 1)
    a = start_s
    while a <= end_s + 1e-9:
        b = min(a + span, end_s)
        yield a, b
        a = a + span + step_s


def _labels_key(labels: dict, host_label: str, gpu_label: str, metric: str) -> tuple[str, int]:
    if host_label not in labels or gpu_label not in labels:
        missing = host_label if host_label not in labels else gpu_label
        shown = ", ".join(sorted(k for k in labels if k != "__name__"))
        raise PrometheusError(f"a {metric} series has no label {missing!r} (its labels: {shown}); "
                              f"pass --host-label / --gpu-label")
    host = labels[host_label]
    try:
        check_path_name(host, f"label {host_label}")
    except BadName as exc:
        raise PrometheusError(str(exc)) from None
    try:
        gpu = int(labels[gpu_label])
        if not 0 <= gpu <= 255:
            raise ValueError
    except ValueError:
        raise PrometheusError(f"label {gpu_label}={labels[gpu_label]!r} is not a GPU index 0..255") from None
    return host, gpu


@contextmanager
def _progress(total: int, enabled: bool | None):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda: None
        return
    with Progress("querying Prometheus", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("chunks", total=total)
        yield lambda: bar.advance(task)


def fetch(url: str, start_s: float, end_s: float, *, step_s: float = 1.0, metric: str = POWER_METRIC,
          energy_metric: str | None = ENERGY_METRIC, host_label: str = "Hostname", gpu_label: str = "gpu",
          max_points: int = MAX_POINTS, progress: bool | None = None, timeout_s: float = 60.0) -> ImportResult:
    """Query every chunk of power (and energy) into memory; writes nothing."""
    if not end_s > start_s:
        raise PrometheusError("--end must be after --start")
    if not step_s > 0:
        raise PrometheusError("--step must be positive")
    client = Client(url, timeout_s)
    res = ImportResult()
    ranges = list(chunks(start_s, end_s, step_s, max_points))
    metrics = [(metric, "power")] + ([(energy_metric, "energy")] if energy_metric else [])
    with _progress(len(ranges) * len(metrics), progress) as advance:
        for a, b in ranges:
            for name, kind in metrics:
                for item in client.query_range(name, a, b, step_s):
                    key = _labels_key(item["metric"], host_label, gpu_label, name)
                    s = res.gpus.get(key)
                    if s is None:
                        if kind == "energy":  # energy for a GPU with no power series: nothing to attach to
                            res.skipped["energy series without a power series"] = res.skipped.get(
                                "energy series without a power series", 0) + 1
                            continue
                        s = res.gpus[key] = Series(*key)
                    s.uuid = s.uuid or item["metric"].get("UUID")
                    s.model = s.model or item["metric"].get("modelName")
                    values = item["values"]
                    t_ms = np.rint(np.array([t for t, _ in values], dtype=np.float64) * 1000).astype(np.int64)
                    v = np.array([x for _, x in values], dtype=np.float64)  # "NaN", "+Inf" parse too
                    if kind == "power":
                        ok = np.isfinite(v) & (v >= 0) & (v <= MAX_POWER_W)
                        if not ok.all():
                            why = f"power outside 0..{MAX_POWER_W:.0f} W"
                            res.skipped[why] = res.skipped.get(why, 0) + int((~ok).sum())
                        s.t_ms.append(t_ms[ok])
                        s.power_avg_w.append(v[ok])
                    else:
                        ok = np.isfinite(v) & (v >= 0)
                        s.energy_t_ms.append(t_ms[ok])
                        s.energy_mj.append(v[ok])
                advance()
            res.chunks += 1
    if not res.gpus:
        raise PrometheusError(f"no {metric} series at {url} between {_iso(start_s)} and {_iso(end_s)} "
                              "(check --metric, --start/--end, and that Prometheus scrapes dcgm-exporter)")
    res.step_s = step_s
    res.scrape_interval_s = _scrape_interval(client, metric, start_s, end_s)
    for s in res.gpus.values():
        s.finish()
        res.resets += int((np.diff(s.energy_mj) < 0).sum())
    return res


def _scrape_interval(client: Client, metric: str, start_s: float, end_s: float) -> float | None:
    """The median scrape interval over series: an hour (or the range) / its sample count."""
    window = int(min(end_s - start_s, 3600))
    if window < 1:
        return None
    result = client.query(f"count_over_time({metric}[{window}s])", end_s)
    per_series = [window / float(r["value"][1]) for r in result if float(r["value"][1]) > 1]
    return float(np.median(per_series)) if per_series else None


def _joined(times: list, values: list) -> tuple[np.ndarray, np.ndarray]:
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    t, v = np.concatenate(times), np.concatenate(values)
    first = np.unique(t, return_index=True)[1]  # sorted by time, first occurrence of each
    return t[first], v[first]


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_table(res: ImportResult) -> pa.Table:
    parts = []
    for s in res.gpus.values():
        n = len(s.t_ms)
        if not n:
            continue
        energy_j, has = np.full(n, np.nan), np.zeros(n, dtype=bool)
        if len(s.energy_t_ms):  # the counter's value at the same step, where there is one
            at = np.minimum(np.searchsorted(s.energy_t_ms, s.t_ms), len(s.energy_t_ms) - 1)
            has = s.energy_t_ms[at] == s.t_ms
            energy_j = s.energy_mj[at] / 1000.0
        types = {f.name: f.type for f in POWER}
        parts.append(pa.table({
            "ts": pa.array(s.t_ms * 1_000_000, pa.int64()).cast(TS),
            "host": pa.array([s.host] * n, pa.string()),
            "gpu": pa.array(np.full(n, s.gpu, dtype=np.uint8)),
            "gpu_uuid": pa.array([s.uuid] * n, pa.string()),
            "power_w": pa.nulls(n, pa.float32()),
            "power_avg_w": pa.array(s.power_avg_w.astype(np.float32)),
            "energy_j": pa.array(energy_j, pa.float64(), mask=~has),
            **{k: pa.nulls(n, types[k]) for k in ("sm_clock_mhz", "gpu_util_pct", "mem_used_mib", "temp_c",
                                                  "power_limit_w")},
            "source": pa.array([SOURCE] * n, pa.string()).dictionary_encode(),
        }))
    return pa.concat_tables(parts) if parts else POWER.empty_table()


def import_prometheus(url: str, start_s: float, end_s: float, data_dir, **kw) -> ImportResult:
    """Fetch everything, then write one file per day and host (named from the query: a re-import replaces)."""
    res = fetch(url, start_s, end_s, **kw)
    table = to_table(res)
    query = json.dumps([url, start_s, end_s, kw.get("step_s", 1.0), kw.get("metric", POWER_METRIC)])
    prefix = f"dcgm-{hashlib.sha1(query.encode()).hexdigest()[:12]}"
    res.written = write_dataset(table, DataRoot.open(data_dir), "power", prefix=prefix, sort_by=["gpu", "ts"],
                                unique_names=False)
    res.rows = table.num_rows
    return res


def stub_inventory(url: str, start_s: float, end_s: float, *, metric: str = POWER_METRIC,
                   host_label: str = "Hostname", gpu_label: str = "gpu", timeout_s: float = 60.0) -> str:
    """An inventory.yaml from the series' labels, for the user to complete (roles, endpoints, TDPs):
    each GPU's ``modelName`` and ``UUID``, and an endpoint per Kubernetes pod holding GPUs
    (dcgm-exporter's ``pod``/``namespace`` labels) with the rule that maps the pod to it."""
    seen: dict[str, dict[int, dict[str, set]]] = {}
    for labels in Client(url, timeout_s).series(metric, start_s, end_s):
        host, gpu = _labels_key(labels, host_label, gpu_label, metric)
        got = seen.setdefault(host, {}).setdefault(gpu, {"model": set(), "uuid": set(), "pod": set()})
        for key, label in (("model", "modelName"), ("uuid", "UUID")):
            if labels.get(label):
                got[key].add(labels[label])
        if labels.get("pod"):  # several series of one GPU: the pods it had over the range
            got["pod"].add((labels.get("namespace") or "", labels["pod"]))
    if not seen:
        raise PrometheusError(f"no {metric} series at {url} between {_iso(start_s)} and {_iso(end_s)}")
    uuids = Counter(u.casefold() for gpus in seen.values() for g in gpus.values() for u in g["uuid"])
    out = ["# Stub from Prometheus labels: check each TDP, set each host's role, and assign endpoints/jobs",
           "# (docs/data-contract.md#inventoryyaml).", "fleets:", "  - name: fleet", "    clusters:",
           "      - name: cluster-0", "        hosts:"]
    pods: dict[tuple[str, str], None] = {}
    for host in sorted(seen):
        out += [f"          - name: {host}", "            role: inference   # or training", "            gpus:"]
        on_host: dict[tuple[str, str], list[int]] = {}
        for gpu, got in sorted(seen[host].items()):
            model = next(iter(got["model"])) if len(got["model"]) == 1 else None
            uuid = next(iter(got["uuid"])) if len(got["uuid"]) == 1 else None
            tdp = next((w for name, w in KNOWN_TDP_W.items() if model and name in model.upper()), None)
            line = f"              - {{index: {gpu}, tdp_w: {tdp or 700}"
            line += f", model: {json.dumps(model)}" if model else ""
            line += f", uuid: {json.dumps(uuid)}" if uuid and uuids[uuid.casefold()] == 1 else ""  # one board, one place
            line += "}" + ("   # TDP unknown: set it" if tdp is None else "")
            out.append(line)
            if len(got["pod"]) == 1:  # a GPU that changed pods over the range is left for the user
                on_host.setdefault(next(iter(got["pod"])), []).append(gpu)
        if on_host:
            out.append("            endpoints:   # one per pod holding GPUs; a training pod is a job (jobs:)")
            for (namespace, pod), gpus in sorted(on_host.items()):
                out.append(f"              - {{name: {json.dumps(pod)}, gpus: {gpus}}}")
                pods[(namespace, pod)] = None
    if pods:
        out += ["kubernetes:   # which endpoint a GPU's pod serves (docs/data-contract.md#kubernetes-labels)", "  rules:"]
        for namespace, pod in pods:
            match = (f"namespace: {json.dumps(namespace)}, " if namespace else "") + f"pod: {json.dumps(pod)}"
            out.append(f"    - {{match: {{{match}}}, endpoint: {json.dumps(pod)}}}")
    return "\n".join(out) + "\n"
