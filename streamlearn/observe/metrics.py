"""Prometheus metrics for the workers, read from the roles' own counters at scrape time.

Roles keep plain counters (cheap on the hot path, no prometheus import); a
`SnapshotCollector` turns a role's `metrics()` dict into metric families when scraped.
Names ending in `_total` are counters, the rest gauges; a dict value becomes one sample
per label value (e.g. dead letters by reason). Each family's help and extra label come from
`streamlearn.observe.catalog`, where every metric is declared.

The same port answers /livez and /readyz (`streamlearn.observe.health`): 200 when live or
ready, 503 when not, with a JSON body saying why.

It listens on loopback unless `STREAMLEARN_METRICS_HOST` says otherwise (compose: 0.0.0.0,
inside its own network), keeps at most `MAX_CONNECTIONS` open and gives each
`REQUEST_DEADLINE_S` for its request (`streamlearn.observe.httpd`). With
`STREAMLEARN_METRICS_TOKEN` (`streamlearn up` sets one per run), /metrics asks for it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamlearn.config.settings import load_settings
from streamlearn.observe.catalog import METRICS
from streamlearn.observe.health import Health, Verdict
from streamlearn.observe.httpd import (
    MAX_CONNECTIONS,
    REQUEST_DEADLINE_S,
    BoundedServer,
    DeadlineHandler,
)

log = logging.getLogger(__name__)

Snapshot = Mapping[str, float | int | None | Mapping[str, float | int]]

# Request latency of actors, seconds: from 0.5 ms to 2.5 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class SnapshotCollector(Collector):
    """Exposes `snapshot()` as `streamlearn_{role}_{name}{model=...}` metric families.

    Help texts and the extra label of dict-valued entries come from the catalog; `labels`
    names that label for an entry the catalog lacks (default "kind"), which is logged once.
    `fixed` labels are on every series (a learner's `variant`).
    """

    def __init__(
        self,
        role: str,
        model: str,
        snapshot: Callable[[], Snapshot],
        labels: Mapping[str, str] | None = None,
        fixed: Mapping[str, str] | None = None,
    ) -> None:
        self.prefix = f"streamlearn_{role}_"
        self.model = model
        self.snapshot = snapshot
        self.labels = dict(labels or {})
        self.fixed = dict(fixed or {})

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
            known = METRICS.get(full)
            if known is None:
                _uncatalogued(full)
            doc = known.help if known else name.replace("_", " ")
            family_type = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
            base = full.removesuffix("_total") if family_type is CounterMetricFamily else full
            names, values_of = ["model", *self.fixed], [self.model, *self.fixed.values()]
            if isinstance(value, Mapping):
                label = (known and known.label) or self.labels.get(name, "kind")
                family = family_type(base, doc, labels=[*names, label])
                for key, v in value.items():
                    family.add_metric([*values_of, str(key)], float(v))
            else:
                family = family_type(base, doc, labels=names)
                family.add_metric(values_of, float(value))
            yield family


class BuildInfo(Collector):
    """`streamlearn_build_info{model, role, version} 1`: which release each worker runs."""

    def __init__(self, role: str, model: str) -> None:
        self.role, self.model = role, model

    def collect(self) -> Iterator[Metric]:
        known = METRICS["streamlearn_build_info"]
        family = GaugeMetricFamily(known.full_name, known.help, labels=list(known.labels))
        family.add_metric([self.model, self.role, package_version()], 1)
        yield family


@functools.cache  # read once: each scrape would scan the installed distributions again
def package_version() -> str:
    """streamlearn's version as installed ("unknown" from a checkout not installed)."""
    try:
        return importlib.metadata.version("streamlearn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def expose(
    role: str,
    model: str,
    snapshot: Callable[[], Snapshot],
    port: int | None,
    labels: Mapping[str, str] | None = None,
    health: Health | None = None,
    host: str | None = None,
    fixed: Mapping[str, str] | None = None,
) -> int | None:
    """Register the role's collector and its `streamlearn_build_info`, and serve /metrics
    (and, with `health`, /livez and /readyz) on `host`:`port` (port 0: any free port; host
    None: `STREAMLEARN_METRICS_HOST`, by default 127.0.0.1). `fixed`: labels on every
    series of the role's (a learner's `variant`).

    Returns the port served, or None when `port` is None (metrics off).
    """
    if port is None:
        return None
    REGISTRY.register(SnapshotCollector(role, model, snapshot, labels, fixed))
    REGISTRY.register(BuildInfo(role, model))
    return serve(port, health, host=host).server_port


class WorkerServer(BoundedServer):
    """The worker's HTTP port: /metrics, /livez, /readyz."""

    def __init__(
        self,
        port: int,
        health: Health | None,
        host: str = "127.0.0.1",
        max_connections: int = MAX_CONNECTIONS,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        token: str | None = None,
    ) -> None:
        super().__init__(
            (host, port),
            _Handler,
            max_connections=max_connections,
            request_deadline_s=request_deadline_s,
        )
        self.health = health
        self.token = token  # /metrics asks for it


def serve(
    port: int,
    health: Health | None = None,
    *,
    host: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
    request_deadline_s: float = REQUEST_DEADLINE_S,
) -> WorkerServer:
    """Start serving on `host`:`port` (port 0: any free port; host None: the setting's) in
    a daemon thread; /metrics asks for `STREAMLEARN_METRICS_TOKEN` when it is set."""
    settings = load_settings()
    secret = settings.metrics_token
    token = None if secret is None else secret.get_secret_value()
    server = WorkerServer(
        port, health, host or settings.metrics_host, max_connections, request_deadline_s, token
    )
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


class _Handler(DeadlineHandler):
    server: WorkerServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            if not self.shows_token(self.server.token):
                self.refuse("/metrics asks for its bearer token (STREAMLEARN_METRICS_TOKEN)")
                return
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


def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram with a `model` label (for per-request observations); its help is the
    catalog's (`doc` for one the catalog lacks)."""
    full = f"streamlearn_{name}"
    known = METRICS.get(full)
    if known is None:
        _uncatalogued(full)
    return Histogram(full, known.help if known else doc, ["model"], buckets=buckets)


_warned: set[str] = set()


def _uncatalogued(name: str) -> None:
    """Say once that a metric is missing from the catalog (it is exposed all the same)."""
    if name not in _warned:
        _warned.add(name)
        log.warning("metric %s is not in streamlearn.observe.catalog: add it there", name)
