"""Alert rules on the live power statistics: a small YAML file, validated with pydantic, evaluated on every
sample in the sampler thread (a few comparisons), notified by a log line, counters on the endpoint and an
optional JSON webhook POST from its own thread (bounded queue, bounded retries and timeout).

Rules file (``--alerts FILE``; reference in docs/collector.md)::

    webhook: {url: http://127.0.0.1:9000/hook, timeout_s: 2, retries: 2, queue_size: 1000}
    rules:
      - name: gpu_swing_2s
        level: gpu            # gpu | host
        quantity: swing_2s_w  # see GPU_QUANTITIES / HOST_QUANTITIES
        threshold: 500
        op: above             # above (default) | below
        for: 0s               # the condition must hold this long (sample time) before firing
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from collectors.outbound import bind_deadline, http_url_problem, read_body
from collectors.printable import printable

log = logging.getLogger("wattline.collect")

GPU_QUANTITIES = {
    "power_w": "instantaneous power (the driver buffer's ~20 ms samples; field 186 without the buffer)",
    "power_avg_w": "the driver's 1 s average (field 185)",
    "pct_of_tdp": "instantaneous power as % of the GPU's TDP (inventory tdp_w, else the enforced power limit)",
    "swing_2s_w": "max − min of power over the last 2 s",
    "swing_10s_w": "max − min of power over the last 10 s",
    "swing_60s_w": "max − min of power over the last 60 s",
}
HOST_QUANTITIES = {
    "power_w": "sum of the host's GPUs on the 20 ms grid",
    "pct_of_provisioned": "that sum as % of the host's provisioned power (inventory)",
    "swing_2s_w": "max − min of the sum over the last 2 s",
    "swing_10s_w": "max − min of the sum over the last 10 s",
    "swing_60s_w": "max − min of the sum over the last 60 s",
    "swing_2s_pct_of_provisioned": "the 2 s swing of the sum as % of provisioned power",
    "swing_10s_pct_of_provisioned": "the 10 s swing of the sum as % of provisioned power",
    "swing_60s_pct_of_provisioned": "the 60 s swing of the sum as % of provisioned power",
}
NEEDS_PROVISIONED = {q for q in HOST_QUANTITIES if q.endswith("pct_of_provisioned")}
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""Prometheus's rule for label names; names starting with ``__`` are reserved to Prometheus."""
MAX_WEBHOOK_ANSWER_BYTES = 1 << 20


class AlertsError(ValueError):
    """The rules file is missing or malformed: one line for the user."""


def parse_duration_s(value) -> float:
    """'500ms', '2s', '1m', 3 → seconds (the same spellings as the collector's options)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", str(value))
    if not m:
        raise ValueError(f"bad duration {value!r}: expected e.g. 0s, 500ms, 2s, 1m")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Rule(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
    level: Literal["gpu", "host"]
    quantity: str
    threshold: float
    op: Literal["above", "below"] = "above"
    for_s: float = Field(default=0.0, alias="for", ge=0, le=3600)
    summary: str | None = None
    labels: dict[str, str] = {}

    @field_validator("for_s", mode="before")
    @classmethod
    def _duration(cls, v):
        return parse_duration_s(v)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not LABEL_NAME.fullmatch(name) or name.startswith("__"):
                raise ValueError(f"label name {printable(name, 100)!r} is not a Prometheus label name "
                                 "([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)")
        return v

    @model_validator(mode="after")
    def _quantity_fits_level(self) -> Rule:
        known = GPU_QUANTITIES if self.level == "gpu" else HOST_QUANTITIES
        if self.quantity not in known:
            raise ValueError(f"quantity {self.quantity!r} is not one of the {self.level}-level quantities "
                             f"({', '.join(known)})")
        return self


class Webhook(_Strict):
    url: str = Field(pattern=r"^https?://\S+$")
    timeout_s: float = Field(default=2.0, gt=0, le=30)
    """Longest one attempt may take, the whole answer included (a total, not per read)."""
    retries: int = Field(default=2, ge=0, le=10)
    queue_size: int = Field(default=1000, ge=1, le=100_000)

    @field_validator("url")
    @classmethod
    def _usable_url(cls, v: str) -> str:
        problem = http_url_problem(v)
        if problem:
            raise ValueError(f"{printable(v, 200)!r} is not a usable http(s) address ({problem})")
        return v


class AlertsFile(_Strict):
    rules: list[Rule] = Field(min_length=1)
    webhook: Webhook | None = None

    @model_validator(mode="after")
    def _names_unique(self) -> AlertsFile:
        names = [r.name for r in self.rules]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"rule name(s) {dup} appear more than once")
        return self


def load_alerts(path: Path | str) -> AlertsFile:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise AlertsError(f"{path}: cannot read the alert rules ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise AlertsError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    try:
        return AlertsFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        msg = err["msg"].removeprefix("Value error, ")
        raise AlertsError(f"{path}: {where}: {msg}{more}") from None


# -- evaluation ------------------------------------------------------------------------------------
@dataclass
class _State:
    since_us: int | None = None
    firing: bool = False
    crossed_us: int = 0


@dataclass
class AlertCounts:
    fired: dict = field(default_factory=dict)  # rule → count
    resolved: dict = field(default_factory=dict)
    firing: dict = field(default_factory=dict)  # (rule, entity key) → labels, while firing


class AlertEngine:
    """Per (rule, GPU or host) state; ``observe`` is called by the sampler thread with each new value.

    An alert fires at the first sample where its condition has held for ``for`` (measured in driver
    time from the sample that crossed the threshold; ``for: 0`` fires at the crossing sample itself)
    and resolves at the first sample where the condition no longer holds.
    """

    def __init__(self, rules: AlertsFile, notifier: WebhookNotifier | None = None):
        self.file = rules
        self.by_level = {lv: [r for r in rules.rules if r.level == lv] for lv in ("gpu", "host")}
        self.state: dict = {}
        self.counts = AlertCounts(fired={r.name: 0 for r in rules.rules}, resolved={r.name: 0 for r in rules.rules})
        self.notifier = notifier
        self.lock = threading.Lock()

    def observe(self, rule: Rule, key, labels_fn, ts_us: int, value: float | None) -> None:
        if value is None:
            return
        cond = value > rule.threshold if rule.op == "above" else value < rule.threshold
        st = self.state.get((rule.name, key))
        if st is None:
            if not cond:
                return
            st = self.state[(rule.name, key)] = _State()
        if cond:
            if st.since_us is None:
                st.since_us = ts_us
            if not st.firing and ts_us - st.since_us >= rule.for_s * 1e6:
                st.firing, st.crossed_us = True, st.since_us
                self._event("firing", rule, key, labels_fn(), value, st.since_us, ts_us)
        else:
            st.since_us = None
            if st.firing:
                st.firing = False
                self._event("resolved", rule, key, labels_fn(), value, st.crossed_us, ts_us)

    def _event(self, status, rule: Rule, key, labels: dict, value: float, crossed_us: int, ts_us: int) -> None:
        now = time.time()
        with self.lock:
            if status == "firing":
                self.counts.fired[rule.name] += 1
                self.counts.firing[(rule.name, key)] = labels
            else:
                self.counts.resolved[rule.name] += 1
                self.counts.firing.pop((rule.name, key), None)
        where = " ".join(f"{k}={v}" for k, v in labels.items() if v)
        sign = ">" if rule.op == "above" else "<"
        if status == "firing":
            log.warning("alert firing: %s %s %s=%.1f %s %g (crossed at %s, %.2f s ago)", rule.name, where,
                        rule.quantity, value, sign, rule.threshold, _iso(crossed_us), now - crossed_us / 1e6)
        else:
            log.warning("alert resolved: %s %s %s=%.1f (fired at %s)", rule.name, where, rule.quantity, value,
                        _iso(crossed_us))
        if self.notifier is not None:
            self.notifier.submit({
                "status": status, "rule": rule.name, "level": rule.level, "quantity": rule.quantity,
                "op": rule.op, "threshold": rule.threshold, "for_s": rule.for_s, "value": round(value, 3),
                "labels": {**labels, **rule.labels}, "summary": rule.summary,
                "crossed_unix_s": crossed_us / 1e6, "sample_unix_s": ts_us / 1e6,
                "crossed_at": _iso(crossed_us), "sent_unix_s": now,
            })


def _iso(ts_us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts_us / 1e6)) + f".{ts_us % 1_000_000 // 1000:03d}Z"


class WebhookNotifier:
    """POSTs alert events as JSON from its own thread. ``submit`` never blocks: a full queue drops the
    event (counted and logged). Each event gets ``retries`` more attempts after a failure, each
    bounded by ``timeout_s`` in all (a webhook trickling its answer is cut there), with 0.5 s, 1 s,
    2 s... between them; an event that fails them all is counted and logged."""

    def __init__(self, cfg: Webhook):
        self.cfg = cfg
        self.queue: queue.Queue = queue.Queue(maxsize=cfg.queue_size)
        self.counts = {"sent": 0, "failed": 0, "dropped": 0, "retried": 0}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="alert-webhook", daemon=True)
        self._last_error_log = 0.0
        self._last_drop_log = -1e9
        self._count_lock = threading.Lock()
        self._url = urllib.parse.urlsplit(cfg.url)
        self._path = (self._url.path or "/") + (f"?{self._url.query}" if self._url.query else "")
        self._conn = None

    def start(self) -> None:
        self.thread.start()

    def stop(self, wait_s: float = 2.0) -> None:
        """Let queued events go out for at most ``wait_s``, then stop; those still queued are dropped
        (counted and logged)."""
        end = time.monotonic() + wait_s
        while not self.queue.empty() and time.monotonic() < end:
            time.sleep(0.02)
        self._stop.set()
        left = 0
        while True:
            try:
                left += self.queue.get_nowait() is not None
            except queue.Empty:
                break
        if left:
            self._dropped(left, "still queued at stop")
        try:
            self.queue.put_nowait(None)  # wakes the thread from its (long) wait
        except queue.Full:  # refilled meanwhile: the thread sees the stop flag after its next event
            pass

    def submit(self, event: dict) -> None:
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self._dropped(1, f"queue full ({self.cfg.queue_size} events waiting)")

    def _dropped(self, n: int, why: str) -> None:
        """Count dropped events; log the first at once, then at most every 30 s with the total."""
        with self._count_lock:
            self.counts["dropped"] += n
            total = self.counts["dropped"]
            now = time.monotonic()
            if now - self._last_drop_log < 30 and why.startswith("queue"):
                return
            self._last_drop_log = now
        log.error("alert webhook %s: %d event(s) dropped, %s; %d dropped in all (the webhook is slower than the "
                  "alerts; log lines and counters unaffected)", printable(self.cfg.url, 200), n, why, total)

    def _post(self, body: bytes) -> None:
        """One POST on a kept-alive connection (a new TCP connection per alert costs more CPU than the
        alert); any error drops the connection, the next attempt opens a new one."""
        if self._conn is None:
            u = self._url
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(u.hostname, u.port, timeout=self.cfg.timeout_s)
        try:  # the whole attempt (connect, send, status, headers, body) ends by timeout_s
            bind_deadline(self._conn, time.monotonic() + self.cfg.timeout_s, self.cfg.timeout_s)
            self._conn.request("POST", self._path, body=body,
                               headers={"Content-Type": "application/json", "User-Agent": "wattline-collect"})
            resp = self._conn.getresponse()
            read_body(resp, MAX_WEBHOOK_ANSWER_BYTES)
            if resp.will_close:
                self._conn.close()
                self._conn = None
            if not 200 <= resp.status < 300:
                raise OSError(f"HTTP {resp.status} {printable(resp.reason, 200)}")
        except Exception:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                event = self.queue.get(timeout=30)  # no idle wake-ups; stop() wakes it
            except queue.Empty:
                continue
            if event is None:
                break
            body = json.dumps(event).encode()
            for attempt in range(self.cfg.retries + 1):
                try:
                    self._post(body)
                    self.counts["sent"] += 1
                    break
                except Exception as exc:  # refused, timeout, HTTP error status: retry, then count
                    if attempt < self.cfg.retries and not self._stop.is_set():
                        self.counts["retried"] += 1
                        self._stop.wait(0.5 * 2 ** attempt)
                        continue
                    self.counts["failed"] += 1
                    now = time.monotonic()
                    if now - self._last_error_log >= 30:
                        self._last_error_log = now
                        log.error("alert webhook %s failed after %d attempt(s) (%s); counted, sampling unaffected",
                                  printable(self.cfg.url, 200), attempt + 1, printable(exc or type(exc).__name__, 300))


# -- the same rules for Prometheus --------------------------------------------------------------------
def _promql(rule: Rule) -> str:
    """The rule as a PromQL condition over the collector's exported metrics. ``power_w`` and the
    percentages of power use the 2 s max (min for ``below``), so no 20 ms sample is missed between
    scrapes as long as Prometheus scrapes at least every 2 s."""
    ext = "max" if rule.op == "above" else "min"
    cmp = ">" if rule.op == "above" else "<"
    lv = rule.level
    q = rule.quantity
    if q == "power_avg_w":
        expr = "wattline_gpu_power_average_watts"
    elif q == "power_w":
        expr = f'wattline_{lv}_power_{ext}_watts{{window="2s"}}'
    elif q == "pct_of_tdp":
        expr = f'100 * wattline_gpu_power_{ext}_watts{{window="2s"}} / ignoring(window) wattline_gpu_tdp_watts'
    elif q == "pct_of_provisioned":
        expr = f'100 * wattline_host_power_{ext}_watts{{window="2s"}} / ignoring(window) wattline_host_provisioned_watts'
    else:  # swing_<N>s_w, swing_<N>s_pct_of_provisioned
        window = q.split("_")[1]
        expr = f'wattline_{lv}_power_swing_watts{{window="{window}"}}'
        if q.endswith("pct_of_provisioned"):
            expr = f"100 * {expr} / ignoring(window) wattline_host_provisioned_watts"
    return f"{expr} {cmp} {rule.threshold:g}"


def prometheus_rules(rules: AlertsFile, group: str = "wattline") -> dict:
    """An alerting-rules file (``rule_files:`` in prometheus.yml) with one alert per rule."""
    out = []
    for r in rules.rules:
        item = {"alert": r.name, "expr": _promql(r)}
        if r.for_s > 0:
            item["for"] = f"{round(r.for_s * 1000)}ms"
        where = "{{ $labels.host }} GPU {{ $labels.gpu }}" if r.level == "gpu" else "host {{ $labels.host }}"
        item["labels"] = {"wattline_rule": r.name, "level": r.level, **r.labels}
        item["annotations"] = {
            "summary": r.summary or f"{r.quantity} {r.op} {r.threshold:g} on {where}",
            "description": f"{where}: {r.quantity} is {{{{ $value | printf \"%.1f\" }}}} ({r.op} {r.threshold:g}"
                           + (f" for {r.for_s:g} s" if r.for_s else "") + ")",
        }
        out.append(item)
    return {"groups": [{"name": group, "rules": out}]}


def prometheus_rules_yaml(rules: AlertsFile) -> str:
    return ("# Generated by `wattline alert-rules` from the collector's alert rules; evaluated by Prometheus\n"
            "# over the metrics of `wattline collect --metrics-listen` (docs/collector.md).\n"
            + yaml.safe_dump(prometheus_rules(rules), sort_keys=False, allow_unicode=True, width=1000))
