"""The collector's live view: per-GPU and per-host power statistics fed by the sampler threads, served as
Prometheus/OpenMetrics encoded by ``prometheus-client`` (``--metrics-listen``) and checked against alert rules.

The sampler calls :meth:`LiveMetrics.on_field` once per tick and :meth:`LiveMetrics.on_buffer` once per
drain; both only update plain Python state (:mod:`collectors.nvml.live`) under one short lock. The
metric families are built at scrape time on the HTTP server's thread (:meth:`LiveMetrics.collect`,
:class:`MetricsServer`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from collectors.nvml.alerts import AlertEngine
from collectors.nvml.live import WINDOWS_S, HostGrid, PowerWindows

GPU_LABELS = ("host", "gpu", "uuid", "role", "endpoint", "training_job")
"""``training_job``, not ``job``: Prometheus sets ``job`` on every scraped series (the scrape job) and
would rename ours to ``exported_job``."""
HOST_LABELS = ("host", "role")


@dataclass
class HostInfo:
    """What the inventory says about this host (all optional: without ``--inventory`` only the TDP
    fallback, the enforced power limit, is known)."""

    role: str | None = None
    provisioned_w: float | None = None
    gpu_tdp_w: dict | None = None  # gpu index → TDP W
    gpu_endpoint: dict | None = None  # gpu index → endpoint name
    gpu_job: dict | None = None  # gpu index → job name


class _Gpu:
    __slots__ = ("index", "uuid", "labels", "windows", "inst_w", "avg_w", "energy_j", "limit_w", "field_ts_us",
                 "tdp_w", "feed_from_field")

    def __init__(self, index: int, tdp_w: float | None):
        self.index = index
        self.uuid: str | None = None
        self.labels: dict = {}
        self.windows = PowerWindows()
        self.windows.threshold_w = tdp_w
        self.inst_w = self.avg_w = self.energy_j = self.limit_w = None
        self.field_ts_us: int | None = None
        self.tdp_w = tdp_w  # from the inventory; None: the enforced power limit once read
        self.feed_from_field = False


class LiveMetrics:
    def __init__(self, host: str, gpus: list[int], info: HostInfo | None = None, alerts: AlertEngine | None = None,
                 buffer: bool = True):
        self.host = host
        self.info = info or HostInfo()
        tdp = self.info.gpu_tdp_w or {}
        self.gpus = {g: _Gpu(g, tdp.get(g)) for g in gpus}
        for g in self.gpus.values():
            g.feed_from_field = not buffer
            g.labels = self._gpu_labels(g)
        self.grid = HostGrid(gpus)
        self.host_windows = PowerWindows()
        self.alerts = alerts
        self.lock = threading.Lock()
        self._gpu_rules = [(r, _gpu_getter(r.quantity)) for r in alerts.by_level["gpu"]] if alerts else []
        self._avg_rules = [(r, g) for r, g in self._gpu_rules if r.quantity == "power_avg_w"]
        self._sample_rules = [(r, g) for r, g in self._gpu_rules if r.quantity != "power_avg_w"]
        prov = self.info.provisioned_w
        self._host_rules = [(r, _host_getter(r.quantity, prov)) for r in alerts.by_level["host"]] if alerts else []

    def _gpu_labels(self, g: _Gpu) -> dict:
        i = self.info
        return {"host": self.host, "gpu": str(g.index), "uuid": g.uuid or "", "role": i.role or "",
                "endpoint": (i.gpu_endpoint or {}).get(g.index) or "",
                "training_job": (i.gpu_job or {}).get(g.index) or ""}

    def set_uuid(self, gpu: int, uuid: str | None) -> None:
        g = self.gpus[gpu]
        if uuid and g.uuid != uuid:
            g.uuid = uuid
            g.labels = self._gpu_labels(g)

    def buffer_off(self, gpu: int) -> None:
        """The driver buffer is not supported on this GPU: the windows follow the instant field instead."""
        self.gpus[gpu].feed_from_field = True

    # -- fed by the sampler threads ----------------------------------------------------------------
    def on_field(self, gpu: int, ts_ns: int, inst_w, avg_w, energy_j, limit_w) -> None:
        g = self.gpus[gpu]
        ts_us = ts_ns // 1000
        with self.lock:
            g.field_ts_us = ts_us
            g.inst_w, g.avg_w = inst_w, avg_w
            if energy_j is not None:
                g.energy_j = energy_j
            if limit_w is not None:
                g.limit_w = limit_w
                if g.tdp_w is None:
                    g.windows.threshold_w = limit_w
            for rule, _get in self._avg_rules:
                self.alerts.observe(rule, gpu, lambda: g.labels, ts_us, avg_w)
            if g.feed_from_field and inst_w is not None:
                self._push(g, [(ts_us, inst_w)])

    def on_buffer(self, gpu: int, samples: list[tuple[int, float]]) -> None:
        """Driver buffer samples [(ts µs, W)], oldest first, already de-duplicated."""
        g = self.gpus[gpu]
        if g.feed_from_field or not samples:
            return
        with self.lock:
            self._push(g, samples)

    def _push(self, g: _Gpu, samples) -> None:
        pw = g.windows
        push = pw.push
        rules = self._sample_rules
        if rules:
            observe = self.alerts.observe
            labels = lambda: g.labels  # noqa: E731
            for ts, w in samples:
                if push(ts, w):
                    for rule, get in rules:
                        observe(rule, g.index, labels, ts, get(pw, g))
        else:
            for ts, w in samples:
                push(ts, w)
        slots = self.grid.add(g.index, samples)
        if slots:
            hw = self.host_windows
            hrules = self._host_rules
            observe = self.alerts.observe if hrules else None
            labels = lambda: {"host": self.host, "role": self.info.role or ""}  # noqa: E731
            for end, w in slots:
                hw.push(end, w)
                for rule, get in hrules:
                    observe(rule, "host", labels, end, get(hw))

    # -- read by the HTTP server's thread ----------------------------------------------------------
    def collect(self):
        now = time.time()
        with self.lock:
            gpus = [(dict(g.labels), g.inst_w, g.avg_w, g.energy_j, g.tdp_w or g.limit_w, g.windows.above_s,
                     g.windows.last_ts, g.field_ts_us,
                     {w: (e.max, e.min, e.swing) for w, e in g.windows.windows.items()}) for g in self.gpus.values()]
            hw = self.host_windows
            host = (hw.last_w, hw.last_ts, {w: (e.max, e.min, e.swing) for w, e in hw.windows.items()},
                    self.grid.incomplete_slots)
            counts = None
            if self.alerts is not None:
                c = self.alerts.counts
                counts = (dict(c.fired), dict(c.resolved), dict(c.firing))
        gl = list(GPU_LABELS)
        fams = {name: GaugeMetricFamily(name, doc, labels=gl) for name, doc in (
            ("wattline_gpu_power_watts", "Instantaneous board power (NVML field 186), newest tick."),
            ("wattline_gpu_power_average_watts", "The driver's 1 s average power (NVML field 185), newest tick."),
            ("wattline_gpu_tdp_watts", "TDP used for time above TDP and pct_of_tdp: inventory tdp_w, else the enforced power limit."),
            ("wattline_gpu_last_sample_timestamp_seconds", "Driver timestamp (Unix s) of the newest sample in the windows."),
            ("wattline_gpu_last_sample_age_seconds", "Seconds from the newest sample in the windows to this scrape (includes the buffer drain period)."),
        )}
        wl = gl + ["window"]
        wfams = {k: GaugeMetricFamily(f"wattline_gpu_power_{k}_watts", doc, labels=wl) for k, doc in (
            ("max", "Highest power sample in the last <window> seconds (driver ~20 ms buffer samples)."),
            ("min", "Lowest power sample in the last <window> seconds."),
            ("swing", "Max minus min of power in the last <window> seconds."),
        )}
        energy = CounterMetricFamily("wattline_gpu_energy_joules", "Energy since the driver loaded (NVML counter, continued across resets).", labels=gl)
        above = CounterMetricFamily("wattline_gpu_above_tdp_seconds", "Time with power above TDP (each sample held until the next, at most 1 s).", labels=gl)
        for labels, inst, avg, en, tdp, above_s, last_ts, _field_ts, win in gpus:
            lv = [labels[k] for k in GPU_LABELS]
            for name, v in (("wattline_gpu_power_watts", inst), ("wattline_gpu_power_average_watts", avg),
                            ("wattline_gpu_tdp_watts", tdp)):
                if v is not None:
                    fams[name].add_metric(lv, v)
            if last_ts is not None:
                fams["wattline_gpu_last_sample_timestamp_seconds"].add_metric(lv, last_ts / 1e6)
                fams["wattline_gpu_last_sample_age_seconds"].add_metric(lv, now - last_ts / 1e6)
            for w, (mx, mn, sw) in win.items():
                if mx is not None:
                    for k, v in (("max", mx), ("min", mn), ("swing", sw)):
                        wfams[k].add_metric(lv + [f"{w}s"], v)
            if en is not None:
                energy.add_metric(lv, en)
            if tdp is not None:
                above.add_metric(lv, above_s)
        yield from fams.values()
        yield from wfams.values()
        yield energy
        yield above
        yield from self._collect_host(now, host)
        if counts is not None:
            yield from _collect_alerts(counts, self.alerts)

    def _collect_host(self, now, host):
        last_w, last_ts, win, incomplete = host
        hl = [self.host, self.info.role or ""]
        out = []
        g = GaugeMetricFamily("wattline_host_power_watts", "Sum of the host's GPUs on the 20 ms grid, newest complete slot.", labels=list(HOST_LABELS))
        if last_w is not None:
            g.add_metric(hl, last_w)
        out.append(g)
        for k, doc in (("max", "Highest 20 ms slot sum in the last <window> seconds."),
                       ("min", "Lowest 20 ms slot sum in the last <window> seconds."),
                       ("swing", "Max minus min of the host's 20 ms slot sums in the last <window> seconds.")):
            f = GaugeMetricFamily(f"wattline_host_power_{k}_watts", doc, labels=list(HOST_LABELS) + ["window"])
            for w, vals in win.items():
                v = vals[("max", "min", "swing").index(k)]
                if v is not None:
                    f.add_metric(hl + [f"{w}s"], v)
            out.append(f)
        f = GaugeMetricFamily("wattline_host_gpus", "GPUs summed in the host's grid.", labels=list(HOST_LABELS))
        f.add_metric(hl, len(self.gpus))
        out.append(f)
        if self.info.provisioned_w:
            f = GaugeMetricFamily("wattline_host_provisioned_watts", "The host's provisioned power (inventory).", labels=list(HOST_LABELS))
            f.add_metric(hl, self.info.provisioned_w)
            out.append(f)
        f = GaugeMetricFamily("wattline_host_last_slot_timestamp_seconds", "End (Unix s) of the newest complete 20 ms slot.", labels=list(HOST_LABELS))
        a = GaugeMetricFamily("wattline_host_last_slot_age_seconds", "Seconds from the newest complete slot to this scrape.", labels=list(HOST_LABELS))
        if last_ts is not None:
            f.add_metric(hl, last_ts / 1e6)
            a.add_metric(hl, now - last_ts / 1e6)
        out += [f, a]
        c = CounterMetricFamily("wattline_host_incomplete_slots", "20 ms slots skipped because a GPU had no sample within 250 ms.", labels=list(HOST_LABELS))
        c.add_metric(hl, incomplete)
        out.append(c)
        return out


def _collect_alerts(counts, engine: AlertEngine):
    fired, resolved, firing = counts
    f = CounterMetricFamily("wattline_alerts_fired", "Alerts fired, per rule.", labels=["rule"])
    r = CounterMetricFamily("wattline_alerts_resolved", "Alerts resolved, per rule.", labels=["rule"])
    for name in fired:
        f.add_metric([name], fired[name])
        r.add_metric([name], resolved[name])
    a = GaugeMetricFamily("wattline_alert_firing", "1 while an alert is firing.", labels=["rule", "host", "gpu"])
    for (name, _key), labels in sorted(firing.items(), key=lambda kv: str(kv[0])):
        a.add_metric([name, labels.get("host", ""), labels.get("gpu", "")], 1)
    out = [f, r, a]
    if engine.notifier is not None:
        w = CounterMetricFamily("wattline_alert_webhook_events", "Webhook deliveries by outcome: sent, failed (after retries), "
                                "dropped (queue full), retried (extra attempts).", labels=["outcome"])
        for k, v in engine.notifier.counts.items():
            w.add_metric([k], v)
        out.append(w)
    return out


def _gpu_getter(q: str):
    if q.startswith("swing_"):
        w = int(q.split("_")[1].removesuffix("s"))
        return lambda pw, g: pw.windows[w].swing
    if q == "power_w":
        return lambda pw, g: pw.last_w
    if q == "pct_of_tdp":
        return lambda pw, g: 100.0 * pw.last_w / pw.threshold_w if pw.threshold_w else None
    return lambda pw, g: g.avg_w


def _host_getter(q: str, provisioned_w: float | None):
    if q == "power_w":
        return lambda hw: hw.last_w
    if q == "pct_of_provisioned":
        return lambda hw: 100.0 * hw.last_w / provisioned_w
    w = int(q.split("_")[1].removesuffix("s"))
    if q.endswith("pct_of_provisioned"):
        return lambda hw: 100.0 * hw.windows[w].swing / provisioned_w
    return lambda hw: hw.windows[w].swing


class _Adapter:
    """prometheus-client's Collector protocol: ``collect()`` yields metric families."""

    def __init__(self, live: LiveMetrics):
        self.live = live

    def collect(self):
        return self.live.collect()


def registry_for(live: LiveMetrics) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Adapter(live))
    return reg


READ_DEADLINE_S = 5.0
"""A connection must have sent its whole request head within this (total, not per byte)."""
WRITE_DEADLINE_S = 10.0
"""...and taken the answer within this; then it is closed."""
MAX_CONNECTIONS = 512
"""Open connections served at once; one more is closed at once (each waiting one costs a few KB)."""
MAX_HEAD_BYTES = 64 * 1024


class MetricsServer:
    """GET (any path) → the registry in the format the scraper asks for (OpenMetrics when its Accept
    header names it, else the Prometheus text format), encoded by prometheus-client.

    An asyncio server on one daemon thread: every connection is read concurrently, each against a
    total deadline for its request head, so a client that sends a byte every few seconds or stays
    idle never delays another's scrape, and costs no thread. The thread sleeps in the selector until
    a connection arrives (no idle wake-ups). Answers are HTTP/1.0 with ``Connection: close``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int):
        self.registry = registry
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))  # OSError here (port in use) reaches the caller
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.server_address = sock.getsockname()
        self.loop = asyncio.new_event_loop()
        self.open_connections = 0
        self.refused_connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._ready = threading.Event()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._server = self.loop.run_until_complete(
                asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD_BYTES))
            self._ready.set()
            self.loop.run_forever()
        finally:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()
            self._ready.set()

    def shutdown(self) -> None:
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:  # closed meanwhile
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            self.refused_connections += 1
            writer.transport.abort()
            return
        self.open_connections += 1
        answered = False
        # a timer, not asyncio.wait_for (a task per read): aborting the transport ends the read
        deadline = self.loop.call_later(READ_DEADLINE_S, writer.transport.abort)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            deadline.cancel()
            writer.write(self._answer(head))
            if writer.transport.get_write_buffer_size():  # a client that does not read: bounded too
                deadline = self.loop.call_later(WRITE_DEADLINE_S, writer.transport.abort)
                await writer.drain()
            answered = True
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # too slow (aborted), too long or gone: dropped
        finally:
            deadline.cancel()
            self.open_connections -= 1
            if answered:
                writer.close()
            else:
                writer.transport.abort()

    def _answer(self, head: bytes) -> bytes:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _plain(400, "Bad Request")
        if parts[0] not in ("GET", "HEAD"):
            return _plain(405, "Method Not Allowed")
        accept = None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == "accept":
                accept = value.strip()
        encoder, content_type = choose_encoder(accept)
        body = encoder(self.registry)
        out = (f"HTTP/1.0 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
               "Connection: close\r\n\r\n").encode("latin-1")
        return out + (body if parts[0] == "GET" else b"")


def _plain(code: int, reason: str) -> bytes:
    body = f"{code} {reason}\n".encode()
    return (f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode("latin-1") + body


def serve(live: LiveMetrics, host: str, port: int):
    """Start the HTTP endpoint on one daemon thread; returns (server, thread). Raises OSError when the
    address cannot be bound (port in use).

    Rather than prometheus-client's ``start_http_server`` (a thread per request, WSGI): a scrape
    costs less CPU, and idle or slow connections cost no thread (:class:`MetricsServer`)."""
    server = MetricsServer(registry_for(live), host, port)
    thread = threading.Thread(target=server.run, name="metrics-http", daemon=True)
    thread.start()
    server._ready.wait(5)
    return server, thread


def stop(server: MetricsServer, thread) -> None:
    """Stop the endpoint now: the loop stops, open connections are dropped, the socket is closed."""
    server.shutdown()
    thread.join(timeout=2)


__all__ = ["LiveMetrics", "HostInfo", "serve", "stop", "registry_for", "WINDOWS_S"]
