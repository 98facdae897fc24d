"""Import NVIDIA dcgm-exporter metrics from a Prometheus server into the ``power`` dataset.

What is read (dcgm-exporter's default counters): ``DCGM_FI_DEV_POWER_USAGE`` (gauge, W: the
driver's power reading, a 1 s average on Ampere and newer) and, when present,
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (counter, mJ since driver load), and when asked
(``limit_metric``) the enforced power limit ``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (gauge, W; dcgm-exporter
exports it only where that field is enabled in its counters CSV, hence opt-in). Series are told apart by
the labels ``Hostname`` (the host) and ``gpu`` (its index); ``UUID`` and ``modelName`` are kept
when present. A GPU whose ``UUID`` the inventory lists is stored as the inventory's host and index
(:func:`place_gpus`; ``Hostname`` may be a Kubernetes node name), power and assignments alike. The
host label's value becomes a path segment, so it must follow ``collectors.names``'s rule.

How: ``/api/v1/query_range`` at ``step`` (Prometheus holds each scrape's value until the next, so
the rows are the scraped series sampled on the step grid), in chunks of at most 11,000 points per
series (Prometheus refuses larger ranges). Every chunk is fetched before anything is written, so
a failure (unreachable server, bad query) writes nothing; the files are then named from the
query, so importing the same range again replaces them instead of adding rows.

What is trusted: nothing in the answer. The range is at most a month unless asked
(``allow_long_range``) and is cut to the days the pipeline can run (``collectors.days``); the
chunks are planned lazily. A point outside the chunk asked for, or outside those days, is
dropped and counted (times are compared as floats, before they become int64 nanoseconds); a
point that is not ``[time, number]`` is dropped and counted, a series without ``metric`` or
``values`` is skipped and counted; an answer without ``data.result`` is one error. Each HTTP call
has a total deadline (a server trickling its answer cannot hold the import) and a size bound, and
redirects are refused (the error names where they point).

Rows: ``power_avg_w`` = the gauge, ``power_w`` null, ``source = 'dcgm'``, ``energy_j`` = the
counter in J (null where there is none), ``power_limit_w`` = the last limit value at or before
the row's time within the range, per GPU (null before the GPU's first limit value, and without
``limit_metric``). A drop of the counter is a reset (driver reload): it is
counted, and the per-GPU energy in the summary adds the increases around it.

Several series of one GPU (dcgm-exporter's ``pod``/``namespace``/``container`` labels change as
pods come and go) give each step to the series whose unbroken run of steps began last. Those labels
(``workload_labels``) are kept per series, and :func:`assignment_rows` turns them, through the
inventory's ``kubernetes:`` rules, into runs of who held each GPU when (the CLI checks them against
the stored assignments and writes them with source ``prometheus``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import sys
import time
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
from collectors.days import writable_ns_bounds, writable_range
from collectors.gpu_specs import KNOWN_TDP_W
from collectors.inventory import GpuPlaceConflict, GpuPlaces, Inventory
from collectors.names import BadName, check_path_name
from collectors.outbound import AnswerTooLarge, DeadlineExceeded, deadline_opener, http_url_problem, read_body
from collectors.parquet_sink import write_dataset
from collectors.printable import printable
from collectors.storage import DataRoot

POWER_METRIC = "DCGM_FI_DEV_POWER_USAGE"
ENERGY_METRIC = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
LIMIT_METRIC = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
"""The enforced power limit (W): not in dcgm-exporter's default counters, so read only when asked."""
SOURCE = "dcgm"
MAX_POINTS = 11_000
"""Prometheus's limit on points per series in one range query."""
MAX_RANGE_S = 31 * 86400
"""Longest --start..--end imported without --allow-long-range (a month of dcgm-exporter data)."""
MAX_ANSWER_BYTES = 1 << 30
"""Largest answer read from Prometheus (one chunk of 11,000 points for ~3,000 GPUs)."""
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
    limit_t_ms: list | np.ndarray = field(default_factory=list)
    limit_w: list | np.ndarray = field(default_factory=list)
    power_sid: list | np.ndarray = field(default_factory=list)
    """Per power point, which of the GPU's series (one per label set: a pod label that changed) gave it."""
    hold_t_ms: list | np.ndarray = field(default_factory=list)
    hold_sid: list | np.ndarray = field(default_factory=list)
    """Every point of the GPU's power series (a dropped value too), for who held the GPU when."""
    labels: tuple[str, int] | None = None
    """The source's (host, gpu) labels, once :func:`place_gpus` has placed the GPU."""
    by_uuid: bool = False
    """Whether the inventory placed the GPU by its UUID."""

    def finish(self, step_s: float = 1.0) -> None:
        """Chunks joined; several series of one GPU (a pod label that changed) give one value per
        timestamp: that of the series whose unbroken run of points began last (the old series of a
        pod that went away may still answer for Prometheus's lookback after the new one began)."""
        gap_ms = 1500.0 * step_s
        self.t_ms, self.power_avg_w, self.power_sid = _newest(self.t_ms, self.power_avg_w, self.power_sid, gap_ms)
        self.hold_t_ms, _, self.hold_sid = _newest(self.hold_t_ms, self.hold_sid, self.hold_sid, gap_ms)
        self.energy_t_ms, self.energy_mj = _joined(self.energy_t_ms, self.energy_mj)
        self.limit_t_ms, self.limit_w = _joined(self.limit_t_ms, self.limit_w)


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
    note: str | None = None  # the asked range was cut to the pipeline's days
    limit_metric: str | None = None  # the power-limit gauge asked for, if any
    series_labels: list = field(default_factory=list)  # series id -> its workload labels (non-empty values)
    series_ids: dict = field(default_factory=dict)  # a series' full label set -> its id
    places: GpuPlaces | None = None  # where place_gpus stored each GPU

    def series_id(self, labels: dict, workload_labels: tuple[str, ...]) -> int:
        """The id of the series with these labels (one GPU has several when its pod changes)."""
        key = tuple(sorted(labels.items()))
        sid = self.series_ids.get(key)
        if sid is None:
            sid = self.series_ids[key] = len(self.series_labels)
            self.series_labels.append({k: labels[k] for k in workload_labels if labels.get(k)})
        return sid

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
                + self._limit_summary()
                + (f"; dropped {skipped}" if skipped else "")
                + (f"; scrape interval ≈ {self.scrape_interval_s:.3g} s" if self.scrape_interval_s else "")
                + (f"; {self.note}" if self.note else "")
                + (f"; {self.places.summary('Hostname/gpu labels')}" if self.places is not None else ""))

    def _limit_summary(self) -> str:
        if not self.limit_metric:
            return ""
        with_limit = sorted({float(w) for s in self.gpus.values() for w in s.limit_w})
        if not with_limit:
            return (f"; no {self.limit_metric} values (power_limit_w left null: is the field enabled in "
                    "dcgm-exporter's counters CSV?)")
        n = sum(1 for s in self.gpus.values() if len(s.limit_w))
        shown = ", ".join(f"{w:g}" for w in with_limit[:5]) + (", ..." if len(with_limit) > 5 else "")
        return f"; power limit on {n} GPU(s): {shown} W"

    def coarse_warning(self) -> str | None:
        """Scrapes slower than the step repeat each value: say which answers that leaves out."""
        if not self.scrape_interval_s or self.scrape_interval_s <= 1.5 * self.step_s:
            return None
        return (f"Prometheus scraped every ≈ {self.scrape_interval_s:.3g} s, so each value repeats over "
                f"{self.scrape_interval_s / self.step_s:.0f} step(s): swings over windows shorter than "
                f"{2 * self.scrape_interval_s:.3g} s and request phases cannot be read from these rows "
                "(docs/connect.md#what-each-source-can-answer)")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error (``_answer`` names where it points), never followed: a POST turned into a
    GET elsewhere, another port, another scheme (``ftp://``) are not the server the user named."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Client:
    """The three HTTP API calls the importer needs, with one-line errors. Each call has a total
    deadline of ``timeout_s`` (connect, headers and body together) and a bounded answer size."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        problem = http_url_problem(url)
        if problem:
            raise PrometheusError(f"--url {url!r}: expected http://HOST:PORT of a Prometheus server ({problem})")
        self.base = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, params: list[tuple[str, str]]):
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.base}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        deadline = time.monotonic() + self.timeout_s
        late = PrometheusError(f"Prometheus at {self.base} did not answer {path} within {self.timeout_s:g} s "
                               "(the whole answer; a server that is overloaded, or a range too large for it)")
        try:
            with deadline_opener(deadline, self.timeout_s, _NoRedirect()).open(req) as resp:
                body = read_body(resp, MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            try:
                body = b"" if 300 <= exc.code < 400 else read_body(exc, 1 << 20)
            except OSError:
                body = b""
            finally:
                exc.close()
            if 300 <= exc.code < 400:
                where = printable(exc.headers.get("Location", "(no Location)"), 200)
                raise PrometheusError(f"{self.base}{path}: HTTP {exc.code} redirect to {where}; redirects are not "
                                      "followed: pass --url the address of the Prometheus server itself") from None
            doc = _json(body)
            if not isinstance(doc, dict):
                raise PrometheusError(f"{self.base}{path}: HTTP {exc.code} ({printable(exc.reason, 200)}); "
                                      "is this a Prometheus server?") from None
            raise PrometheusError(self._error_text(doc)) from None
        except DeadlineExceeded:
            raise late from None
        except AnswerTooLarge:
            raise PrometheusError(f"Prometheus at {self.base}: the answer to {path} is larger than "
                                  f"{MAX_ANSWER_BYTES >> 20} MiB; import fewer series or a shorter range") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, DeadlineExceeded):
                raise late from None
            raise PrometheusError(f"cannot reach Prometheus at {self.base} ({printable(reason, 200)})") from None
        doc = _json(body)
        if not isinstance(doc, dict):
            raise PrometheusError(f"{self.base}{path}: the answer is not a JSON object; is this a Prometheus server?")
        if doc.get("status") != "success":
            raise PrometheusError(self._error_text(doc))
        if "data" not in doc:
            raise PrometheusError(f"{self.base}{path}: the answer has no 'data'; is this a Prometheus server?")
        return doc["data"]

    def _error_text(self, doc: dict) -> str:
        """The server's own error, its control characters escaped and its length capped."""
        return (f"Prometheus at {self.base}: {printable(doc.get('errorType', 'error'), 100)}: "
                f"{printable(doc.get('error', ''), 500)}")

    def _result(self, data, what: str) -> list:
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise PrometheusError(f"Prometheus at {self.base}: the answer to {what} has no list 'data.result'; "
                                  "is this a Prometheus server?")
        return result

    def query_range(self, query: str, start_s: float, end_s: float, step_s: float):
        data = self.get("/api/v1/query_range", [("query", query), ("start", _fmt(start_s)), ("end", _fmt(end_s)),
                                                ("step", _fmt(step_s))])
        return self._result(data, "query_range")

    def query(self, query: str, at_s: float):
        return self._result(self.get("/api/v1/query", [("query", query), ("time", _fmt(at_s))]), "query")

    def series(self, metric: str, start_s: float, end_s: float) -> list[dict]:
        data = self.get("/api/v1/series", [("match[]", metric), ("start", _fmt(start_s)), ("end", _fmt(end_s))])
        if not isinstance(data, list):
            raise PrometheusError(f"Prometheus at {self.base}: the answer to series has no list 'data'")
        return [labels for labels in data if isinstance(labels, dict)]


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None


def _fmt(seconds: float) -> str:
    return f"{seconds:.3f}"


def _labels_key(labels: dict, host_label: str, gpu_label: str, metric: str) -> tuple[str, int]:
    if host_label not in labels or gpu_label not in labels:
        missing = host_label if host_label not in labels else gpu_label
        shown = ", ".join(sorted(k for k in labels if k != "__name__"))
        raise PrometheusError(f"a {metric} series has no label {missing!r} (its labels: {shown}); "
                              f"pass --host-label / --gpu-label")
    host = labels[host_label]
    if not isinstance(host, str):
        raise PrometheusError(f"label {host_label}={printable(host, 100)}: not a string; is this a Prometheus server?")
    try:
        check_path_name(host, f"label {host_label}")
    except BadName as exc:
        raise PrometheusError(str(exc)) from None
    try:
        gpu = int(labels[gpu_label])
        if not 0 <= gpu <= 255:
            raise ValueError
    except (ValueError, TypeError, OverflowError):
        raise PrometheusError(f"label {gpu_label}={printable(repr(labels[gpu_label]), 100)} is not a GPU index 0..255") from None
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


def chunks(start_s: float, end_s: float, step_s: float, max_points: int = MAX_POINTS):
    """[a, b] ranges on the grid start + k·step covering [start, end], each ≤ max_points points; a
    generator, so a long range is planned one query at a time."""
    span = step_s * (max_points - 1)
    k = 0
    while (a := start_s + k * (span + step_s)) <= end_s + 1e-9:
        yield a, min(a + span, end_s)
        k += 1


def chunk_count(start_s: float, end_s: float, step_s: float, max_points: int = MAX_POINTS) -> int:
    """How many ranges :func:`chunks` yields (without planning them)."""
    return int((end_s - start_s + 1e-9) // (step_s * max_points)) + 1


def _drop(res: ImportResult, why: str, n: int) -> None:
    if n:
        res.skipped[why] = res.skipped.get(why, 0) + n


def _points(values, a_s: float, b_s: float, res: ImportResult) -> tuple[np.ndarray, np.ndarray] | None:
    """[[t, "v"], ...] of one series → (t ms, v) inside the asked [a, b] (which lies inside the
    pipeline's days), each point dropped otherwise counted by why. Times are range-checked as floats
    before they become integers, so no timestamp can wrap around int64. None: not a list of points."""
    if not isinstance(values, list):
        return None
    try:
        pts = np.array(values, dtype=np.float64)  # "NaN", "+Inf" parse too
        if pts.ndim != 2 or pts.shape[1] != 2:
            raise ValueError
    except (ValueError, TypeError):  # one bad point must not cost the series: point by point
        good = []
        for p in values:
            try:
                if not isinstance(p, list | tuple) or len(p) != 2:
                    raise ValueError
                good.append((float(p[0]), float(p[1])))
            except (ValueError, TypeError, OverflowError):
                continue
        _drop(res, "points that are not [time, number]", len(values) - len(good))
        pts = np.array(good, dtype=np.float64).reshape(-1, 2)
    t, v = pts[:, 0], pts[:, 1]
    first_s, end_s = (b / 1e9 for b in writable_ns_bounds())
    in_days = np.isfinite(t) & (t >= first_s) & (t < end_s)
    _drop(res, "points outside the pipeline's days", int((~in_days).sum()))
    asked = in_days & (t >= a_s - 0.0005) & (t <= b_s + 0.0005)
    _drop(res, "points outside the asked range", int((in_days & ~asked).sum()))
    return np.rint(t[asked] * 1000).astype(np.int64), v[asked]


def _query_range(start_s: float, end_s: float, step_s: float, allow_long_range: bool) -> tuple[float, float, str | None]:
    """The range to query: checked, and cut to the days the pipeline can run (on the step grid of
    ``start``); with a note when it was cut."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)):
        raise PrometheusError("--start and --end must be finite times")
    if not end_s > start_s:
        raise PrometheusError("--end must be after --start")
    if not step_s > 0:
        raise PrometheusError("--step must be positive")
    if end_s - start_s > MAX_RANGE_S and not allow_long_range:
        hint = " (--end in milliseconds? give Unix seconds)" if end_s > 1e11 or start_s > 1e11 else ""
        raise PrometheusError(f"--start {_iso(start_s)} .. --end {_iso(end_s)} spans {(end_s - start_s) / 86400:,.1f} days, "
                              f"over {MAX_RANGE_S // 86400} days{hint}; import it in parts, or pass --allow-long-range")
    first_ns, end_ns = writable_ns_bounds()
    lo, hi = start_s, min(end_s, end_ns / 1e9 - 0.001)
    if lo < first_ns / 1e9:
        lo = start_s + math.ceil((first_ns / 1e9 - start_s) / step_s) * step_s
    if lo > hi:
        raise PrometheusError(f"--start {_iso(start_s)} .. --end {_iso(end_s)} lies outside the days the pipeline "
                              f"can run ({writable_range()}); nothing to import")
    note = None
    if (lo, hi) != (start_s, end_s) and hi - lo < end_s - start_s - step_s / 2:
        note = f"queried {_iso(lo)} .. {_iso(hi)} only: the rest is outside the days the pipeline can run ({writable_range()})"
    return lo, hi, note


def fetch(url: str, start_s: float, end_s: float, *, step_s: float = 1.0, metric: str = POWER_METRIC,
          energy_metric: str | None = ENERGY_METRIC, host_label: str = "Hostname", gpu_label: str = "gpu",
          max_points: int = MAX_POINTS, progress: bool | None = None, timeout_s: float = 60.0,
          allow_long_range: bool = False, limit_metric: str | None = None,
          workload_labels: tuple[str, ...] = ()) -> ImportResult:
    """Query every chunk of power (and energy, and the power limit when asked) into memory; writes
    nothing. ``workload_labels``: the labels (a pod's) kept per series, for :func:`assignment_rows`."""
    lo, hi, note = _query_range(start_s, end_s, step_s, allow_long_range)
    client = Client(url, timeout_s)
    res = ImportResult(note=note, limit_metric=limit_metric)
    metrics = ([(metric, "power")] + ([(energy_metric, "energy")] if energy_metric else [])
               + ([(limit_metric, "limit")] if limit_metric else []))
    with _progress(chunk_count(lo, hi, step_s, max_points) * len(metrics), progress) as advance:
        for a, b in chunks(lo, hi, step_s, max_points):
            for name, kind in metrics:
                for item in client.query_range(name, a, b, step_s):
                    labels = item.get("metric") if isinstance(item, dict) else None
                    if (not isinstance(labels, dict) or not isinstance(item.get("values"), list)
                            or not all(isinstance(v, str) for v in labels.values())):
                        _drop(res, "malformed series (no 'metric' object or 'values' list)", 1)
                        continue
                    key = _labels_key(labels, host_label, gpu_label, name)
                    s = res.gpus.get(key)
                    if s is None:
                        if kind != "power":  # energy or a limit for a GPU with no power series: nothing to attach to
                            _drop(res, f"{kind} series without a power series", 1)
                            continue
                        s = res.gpus[key] = Series(*key)
                    s.uuid = s.uuid or _text(labels.get("UUID"))
                    s.model = s.model or _text(labels.get("modelName"))
                    pts = _points(item["values"], a, b, res)
                    if pts is None:
                        continue
                    t_ms, v = pts
                    if kind == "power":
                        sid = res.series_id(labels, workload_labels)
                        ok = np.isfinite(v) & (v >= 0) & (v <= MAX_POWER_W)
                        _drop(res, f"power outside 0..{MAX_POWER_W:.0f} W", int((~ok).sum()))
                        s.t_ms.append(t_ms[ok])
                        s.power_avg_w.append(v[ok])
                        s.power_sid.append(np.full(int(ok.sum()), sid, dtype=np.int64))
                        s.hold_t_ms.append(t_ms)
                        s.hold_sid.append(np.full(len(t_ms), sid, dtype=np.int64))
                    elif kind == "limit":  # a limit of 0 W or above any board's power is no limit
                        ok = np.isfinite(v) & (v > 0) & (v <= MAX_POWER_W)
                        _drop(res, f"power limit outside 0..{MAX_POWER_W:.0f} W", int((~ok).sum()))
                        s.limit_t_ms.append(t_ms[ok])
                        s.limit_w.append(v[ok])
                    else:
                        ok = np.isfinite(v) & (v >= 0)
                        s.energy_t_ms.append(t_ms[ok])
                        s.energy_mj.append(v[ok])
                advance()
            res.chunks += 1
    if not res.gpus:
        raise PrometheusError(f"no {metric} series at {url} between {_iso(lo)} and {_iso(hi)} "
                              "(check --metric, --start/--end, and that Prometheus scrapes dcgm-exporter)")
    res.step_s = step_s
    res.scrape_interval_s = _scrape_interval(client, metric, lo, hi)
    for s in res.gpus.values():
        s.finish(step_s)
        res.resets += int((np.diff(s.energy_mj) < 0).sum())
    return res


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def _scrape_interval(client: Client, metric: str, start_s: float, end_s: float) -> float | None:
    """The median scrape interval over series: an hour (or the range) / its sample count."""
    window = int(min(end_s - start_s, 3600))
    if window < 1:
        return None
    per_series = []
    for r in client.query(f"count_over_time({metric}[{window}s])", end_s):
        try:
            n = float(r["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(n) and n > 1:
            per_series.append(window / n)
    return float(np.median(per_series)) if per_series else None


def _joined(times: list, values: list) -> tuple[np.ndarray, np.ndarray]:
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    t, v = np.concatenate(times), np.concatenate(values)
    first = np.unique(t, return_index=True)[1]  # sorted by time, first occurrence of each
    return t[first], v[first]


def _newest(times: list, values: list, sids: list, gap_ms: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One point per timestamp: of several series' points there, the one of the series whose run of
    points (no gap over ``gap_ms``) began last; ties go to the first seen."""
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.int64)
    t, v, sid = np.concatenate(times), np.concatenate(values), np.concatenate(sids)
    n = len(t)
    order = np.lexsort((t, sid))  # each series' points in time order
    t_o, sid_o = t[order], sid[order]
    begins = np.ones(n, dtype=bool)
    begins[1:] = (sid_o[1:] != sid_o[:-1]) | (np.diff(t_o) > gap_ms)
    run_start = np.empty(n, np.int64)
    run_start[order] = t_o[np.maximum.accumulate(np.where(begins, np.arange(n), 0))]
    pick = np.lexsort((np.arange(n), -run_start, t))  # by time, then the latest run, then first seen
    first = np.ones(n, dtype=bool)
    first[1:] = t[pick][1:] != t[pick][:-1]
    chosen = pick[first]
    return t[chosen], v[chosen], sid[chosen]


def place_gpus(res: ImportResult, inventory: Inventory | None) -> None:
    """Store each GPU where the inventory names it by its UUID (dcgm-exporter's ``Hostname`` may be a
    Kubernetes node name, its ``gpu`` an index the inventory numbers otherwise), else under its labels
    (:class:`collectors.inventory.GpuPlaces`). Series of one UUID under several labels become one.
    Placing again gives the same places."""
    places = GpuPlaces(inventory)
    placed: dict[tuple[str, int], Series] = {}
    for s in res.gpus.values():
        s.labels = s.labels or (s.host, s.gpu)
        try:
            s.host, s.gpu = places.place(s.labels[0], s.labels[1], s.uuid)
        except GpuPlaceConflict as exc:
            raise PrometheusError(f"nothing written: {exc}") from None
        s.by_uuid = places.by_uuid_place(s.labels[0], s.labels[1], s.uuid)
        if (s.host, s.gpu) in placed:
            _merge_into(placed[(s.host, s.gpu)], s)
        else:
            placed[(s.host, s.gpu)] = s
    res.gpus, res.places = placed, places


def _merge_into(a: Series, b: Series) -> None:
    """One board's series under two label sets (a renamed node): its points, first seen per time."""
    for t, vs in (("t_ms", ("power_avg_w", "power_sid")), ("hold_t_ms", ("hold_sid",)),
                  ("energy_t_ms", ("energy_mj",)), ("limit_t_ms", ("limit_w",))):
        times = np.concatenate([getattr(a, t), getattr(b, t)])
        first = np.unique(times, return_index=True)[1]
        setattr(a, t, times[first])
        for v in vs:
            setattr(a, v, np.concatenate([getattr(a, v), getattr(b, v)])[first])
    a.model = a.model or b.model


def assignment_rows(res: ImportResult, inventory: Inventory) -> tuple[list[dict], Counter]:
    """Who held each GPU when, from its series' pod labels and the inventory's ``kubernetes:``
    rules: runs of steps whose series map to one endpoint or job, each [first step, last step +
    step). A GPU is named by its UUID where the inventory knows it, else by its host and index
    labels (:func:`place_gpus`, as the power rows are; placed here unless the caller already did).
    Also the steps whose pod no rule maps, per ``namespace/pod``."""
    rules = inventory.kubernetes
    rows: list[dict] = []
    unmatched: Counter = Counter()
    if rules is None or not rules.rules:
        return rows, unmatched
    if res.places is None:
        place_gpus(res, inventory)
    step_ms = int(round(res.step_s * 1000))
    owner = [rules.workload_for(labels) for labels in res.series_labels]
    pod, namespace = rules.labels.pod, rules.labels.namespace
    for s in res.gpus.values():
        place = {"host": s.host, "gpu": s.gpu, "gpu_uuid": s.uuid if s.by_uuid else None}
        run: list = []  # [workload, from ms, last ms]
        for t, sid in zip(s.hold_t_ms.tolist(), s.hold_sid.tolist(), strict=True):
            who = owner[sid]
            if who is None:
                labels = res.series_labels[sid]
                if labels.get(pod):
                    unmatched[f"{labels.get(namespace, '')}/{labels[pod]}".lstrip("/")] += 1
            if run and (who != run[0] or t - run[2] > 1.5 * step_ms):
                rows.append(_held_row(place, run, step_ms))
                run = []
            if who is not None:
                run = run or [who, t, t]
                run[2] = t
        if run:
            rows.append(_held_row(place, run, step_ms))
    return rows, unmatched


def _held_row(place: dict, run: list, step_ms: int) -> dict:
    (kind, name), lo, last = run
    return dict(place, kind=kind, name=name, from_ts=_utc_ms(lo), to_ts=_utc_ms(last + step_ms))


def _utc_ms(t_ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=t_ms)


def _iso(seconds: float) -> str:
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # beyond year 9999 (an --end in milliseconds)
        return f"{seconds:.6g} s"


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
        limit_w, has_limit = np.full(n, np.nan), np.zeros(n, dtype=bool)
        if len(s.limit_t_ms):  # the last limit value at or before each row: carried forward, never back
            at = np.searchsorted(s.limit_t_ms, s.t_ms, side="right") - 1
            has_limit = at >= 0
            limit_w = s.limit_w[np.maximum(at, 0)]
        types = {f.name: f.type for f in POWER}
        parts.append(pa.table({
            "ts": pa.array(s.t_ms * 1_000_000, pa.int64()).cast(TS),
            "host": pa.array([s.host] * n, pa.string()),
            "gpu": pa.array(np.full(n, s.gpu, dtype=np.uint8)),
            "gpu_uuid": pa.array([s.uuid] * n, pa.string()),
            "power_w": pa.nulls(n, pa.float32()),
            "power_avg_w": pa.array(s.power_avg_w.astype(np.float32)),
            "energy_j": pa.array(energy_j, pa.float64(), mask=~has),
            **{k: pa.nulls(n, types[k]) for k in ("sm_clock_mhz", "gpu_util_pct", "mem_used_mib", "temp_c")},
            "power_limit_w": pa.array(limit_w, pa.float64(), mask=~has_limit).cast(types["power_limit_w"]),
            "source": pa.array([SOURCE] * n, pa.string()).dictionary_encode(),
        }))
    return pa.concat_tables(parts) if parts else POWER.empty_table()


def query_name(url: str, start_s: float, end_s: float, step_s: float = 1.0, metric: str = POWER_METRIC) -> str:
    """The name of what one query writes (``dcgm-<hash>``): importing the same range again replaces it."""
    query = json.dumps([url, start_s, end_s, step_s, metric])
    return f"dcgm-{hashlib.sha1(query.encode()).hexdigest()[:12]}"


def store_power(res: ImportResult, data_dir, name: str) -> ImportResult:
    """Write the fetched rows: one file per day and host, named ``name`` (a re-import replaces)."""
    table = to_table(res)
    res.written = write_dataset(table, DataRoot.open(data_dir), "power", prefix=name, sort_by=["gpu", "ts"],
                                unique_names=False)
    res.rows = table.num_rows
    return res


def import_prometheus(url: str, start_s: float, end_s: float, data_dir, inventory: Inventory | None = None,
                      **kw) -> ImportResult:
    """Fetch everything, place each GPU (by its UUID where the inventory knows it), then write one file
    per day and host (named from the query: a re-import replaces)."""
    res = fetch(url, start_s, end_s, **kw)
    place_gpus(res, inventory)
    return store_power(res, data_dir, query_name(url, start_s, end_s, kw.get("step_s", 1.0), kw.get("metric", POWER_METRIC)))


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
