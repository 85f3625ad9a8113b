"""Prometheus metrics for the workers, read from the roles' own counters at scrape time.

Roles keep plain counters (cheap on the hot path, no prometheus import); a
`SnapshotCollector` turns a role's `metrics()` dict into metric families when scraped.
Names ending in `_total` are counters, the rest gauges; a dict value becomes one sample
per label value (e.g. dead letters by reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

Snapshot = Mapping[str, float | int | None | Mapping[str, float | int]]

# Request latency of actors, seconds: from 0.5 ms to 2.5 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


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
) -> int | None:
    """Register the role's collector and serve /metrics on `port` (0: any free port).

    Returns the port served, or None when `port` is None (metrics off).
    """
    if port is None:
        return None
    REGISTRY.register(SnapshotCollector(role, model, snapshot, labels))
    server, _ = start_http_server(port, addr="0.0.0.0")
    return server.server_port


def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram with a `model` label (for per-request observations)."""
    return Histogram(f"streamlearn_{name}", doc, ["model"], buckets=buckets)
