"""Prometheus metrics for the workers, read from the roles' own counters at scrape time.

Roles keep plain counters (cheap on the hot path, no prometheus import); a
`SnapshotCollector` turns a role's `metrics()` dict into metric families when scraped.
Names ending in `_total` are counters, the rest gauges; a dict value becomes one sample
per label value (e.g. dead letters by reason).

The same port answers /livez and /readyz (`streamlearn.observe.health`): 200 when live or
ready, 503 when not, with a JSON body saying why.

It listens on loopback unless `STREAMLEARN_METRICS_HOST` says otherwise (compose: 0.0.0.0,
inside its own network), and drops a client that sends nothing for `CLIENT_TIMEOUT_S`.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamlearn.config.settings import load_settings
from streamlearn.observe.health import Health, Verdict

log = logging.getLogger(__name__)

Snapshot = Mapping[str, float | int | None | Mapping[str, float | int]]

# Request latency of actors, seconds: from 0.5 ms to 2.5 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# A client silent this long is dropped: a probe answers in milliseconds, and each open
# connection holds a thread.
CLIENT_TIMEOUT_S = 5.0


class SnapshotCollector(Collector):
    """Exposes `snapshot()` as `streamlearn_{role}_{name}{model=...}` metric families.

    `labels` names the extra label of dict-valued entries (default "kind").
    """

    def __init__(
        self,
        role: str,
        model: str,
        snapshot: Callable[[], Snapshot],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.prefix = f"streamlearn_{role}_"
        self.model = model
        self.snapshot = snapshot
        self.labels = dict(labels or {})

    def collect(self) -> Iterator[Metric]:
        try:
            values = dict(self.snapshot())
        except Exception as exc:  # a scrape must never take the worker down
            log.warning("metrics snapshot failed: %s", exc)
            return
        for name, value in values.items():
            if value is None:
                continue
            full = self.prefix + name
            family_type = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
            base = full.removesuffix("_total") if family_type is CounterMetricFamily else full
            if isinstance(value, Mapping):
                label = self.labels.get(name, "kind")
                family = family_type(base, name.replace("_", " "), labels=["model", label])
                for key, v in value.items():
                    family.add_metric([self.model, str(key)], float(v))
            else:
                family = family_type(base, name.replace("_", " "), labels=["model"])
                family.add_metric([self.model], float(value))
            yield family


def expose(
    role: str,
    model: str,
    snapshot: Callable[[], Snapshot],
    port: int | None,
    labels: Mapping[str, str] | None = None,
    health: Health | None = None,
    host: str | None = None,
) -> int | None:
    """Register the role's collector and serve /metrics (and, with `health`, /livez and
    /readyz) on `host`:`port` (port 0: any free port; host None: `STREAMLEARN_METRICS_HOST`,
    by default 127.0.0.1).

    Returns the port served, or None when `port` is None (metrics off).
    """
    if port is None:
        return None
    REGISTRY.register(SnapshotCollector(role, model, snapshot, labels))
    return serve(port, health, host=host).server_port


class WorkerServer(ThreadingHTTPServer):
    """The worker's HTTP port: /metrics, /livez, /readyz, on daemon threads."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        health: Health | None,
        host: str = "127.0.0.1",
        client_timeout_s: float = CLIENT_TIMEOUT_S,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)
        self.health = health
        self.client_timeout_s = client_timeout_s


def serve(
    port: int,
    health: Health | None = None,
    *,
    host: str | None = None,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
) -> WorkerServer:
    """Start serving on `host`:`port` (port 0: any free port; host None: the setting's) in
    a daemon thread."""
    if host is None:
        host = load_settings().metrics_host
    server = WorkerServer(port, health, host, client_timeout_s)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    server: WorkerServer

    def setup(self) -> None:
        self.timeout = self.server.client_timeout_s  # type: ignore[misc]  # read by StreamRequestHandler.setup
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            return
        health = self.server.health
        if path in ("/livez", "/readyz") and health is not None:
            verdict = health.live() if path == "/livez" else health.ready()
            self._verdict(verdict)
            return
        self._answer(404, "text/plain; charset=utf-8", b"not found: /metrics, /livez, /readyz\n")

    def _verdict(self, verdict: Verdict) -> None:
        body = json.dumps({"ok": verdict.ok, **verdict.detail}).encode() + b"\n"
        self._answer(200 if verdict.ok else 503, "application/json", body)

    def _answer(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: a probe every few seconds is not news."""


def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram with a `model` label (for per-request observations)."""
    return Histogram(f"streamlearn_{name}", doc, ["model"], buckets=buckets)
