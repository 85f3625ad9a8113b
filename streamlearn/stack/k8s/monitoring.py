"""What the install gives a Prometheus Operator and Grafana (`--monitoring`): a PodMonitor
of every role's /metrics, a PrometheusRule of `deploy/prometheus/alerts.yml`'s groups (the
file compose's Prometheus reads, not a copy) and `deploy/grafana/dashboards/streamlearn.json`
as a ConfigMap that Grafana's dashboard sidecar picks up (`grafana_dashboard: "1"`).
"""

from __future__ import annotations

from streamlearn.stack.k8s.roles import NAMESPACE
from streamlearn.stack.k8s.templates import Obj, deploy_file, load_all

MONITORING_API = "monitoring.coreos.com/v1"
LABELS = {"app.kubernetes.io/name": "streamlearn", "app.kubernetes.io/part-of": "streamlearn"}
# The label Grafana's sidecar (the grafana chart's, kube-prometheus-stack's) looks for.
DASHBOARD_LABEL = {"grafana_dashboard": "1"}


def objects() -> list[Obj]:
    meta = {"name": "streamlearn", "namespace": NAMESPACE, "labels": dict(LABELS)}
    [alerts] = load_all("prometheus/alerts.yml")
    pod_monitor = {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": meta,
        "spec": {
            # Every role's pods, and only theirs (the servers are named otherwise).
            "selector": {"matchLabels": {"app.kubernetes.io/name": "streamlearn"}},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
        },
    }
    rule = {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": alerts["groups"]},
    }
    dashboard = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "streamlearn-dashboard",
            "namespace": NAMESPACE,
            "labels": {**LABELS, **DASHBOARD_LABEL},
        },
        "data": {
            "streamlearn.json": deploy_file("grafana/dashboards/streamlearn.json").read_text()
        },
    }
    return [pod_monitor, rule, dashboard]
