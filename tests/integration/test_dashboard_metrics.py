"""The deployed stack's monitoring: every query of the Grafana dashboard names a metric the
real workers export, Prometheus scrapes every role compose runs on the port it serves, and
the image's healthcheck reads the workers' /readyz."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from streamlearn.stack.embedded import free_port
from tests.conftest import ROOT, eventually, plain_paho

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamlearn.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
TOML = """
[models.p]
inputs = 2
task = "binary"

[models.p.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
"""

# PromQL words that are not metric names: aggregation modifiers, set operators, keywords.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana `label_values(...)`) reads.

    >>> sorted(metric_names('sum by (le, model) (rate(a_bucket{model=~"$model"}[5m])) / b'))
    ['a_bucket', 'b']
    """
    expr = re.sub(r"\blabel_values\(\s*([a-zA-Z_:][\w:]*)\s*,[^)]*\)", r"\1", expr)
    expr = re.sub(r"\blabel_values\([^)]*\)", "", expr)  # label_values(label): no metric
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", expr):
        if not m[2] and m[1].lower() not in KEYWORDS:
            names.add(m[1])
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    queries = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            queries.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(doc["panels"])
    for variable in doc.get("templating", {}).get("list", []):
        if variable["type"] == "datasource":  # its query is a plugin's name: prometheus
            continue
        query = variable.get("query")
        queries.append(query["query"] if isinstance(query, dict) else query or "")
    return [q for q in queries if q]


def exported(port: int) -> set[str]:
    """Every name a worker's /metrics page exposes: families (# TYPE) and samples."""
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    names = set()
    for line in page.splitlines():
        m = re.match(r"# TYPE (\S+) (\w+)", line) or re.match(r"([a-zA-Z_:][\w:]*)[{ ]", line)
        if m:
            names.add(m[1])
            if line.startswith("# TYPE") and m[2] == "counter":
                names.add(m[1] + "_total")
    return names


def healthcheck_script() -> str:
    """The image's `streamlearn-healthcheck`, as deploy/Dockerfile writes it."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    found = re.search(r"<<'EOF' /usr/local/bin/streamlearn-healthcheck\n(.*?)\nEOF\n", text, re.S)
    assert found, "streamlearn-healthcheck not found in deploy/Dockerfile"
    return found[1]


def probe(port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", healthcheck_script()],
        env={"STREAMLEARN_METRICS_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_name_extraction_finds_what_a_query_reads():
    assert metric_names(
        'histogram_quantile(0.99, sum by (le, model) (rate(x_bucket{model=~"$model"}'
        "[$__rate_interval]))) / on (model) group_left max(y) > bool 0"
    ) == {"x_bucket", "y"}
    assert metric_names("label_values(streamlearn_learner_version, model)") == {
        "streamlearn_learner_version"
    }
    assert metric_names("up") == {"up"}, "a metric no worker exports is found, and fails"


def test_every_dashboard_query_names_a_metric_the_workers_export(start_role, client_for, settings):
    queries = dashboard_queries()
    assert len(queries) >= 10, "the dashboard has its panels"
    wanted = {name: q for q in queries for name in metric_names(q)}
    ports = {role: free_port() for role in ("ingest", "actor", "learner")}
    for role, port in ports.items():  # the actor before the learner: no weights yet
        start_role(role, TOML, env={"STREAMLEARN_METRICS_PORT": str(port)})
        if role == "actor":  # a built-in model answers its prior at once: healthy at once
            ready = probe(port)
            assert ready.returncode == 0 and '"weights": "ok"' in ready.stdout, ready

    # samples and a request, so that every family has its samples
    device = plain_paho(settings)
    topic = f"{settings.topic_prefix}/p/samples"
    infos = [
        device.publish(topic, f'{{"x": [{i % 5}, 1], "y": {i % 2}}}', qos=1) for i in range(50)
    ]
    infos.append(device.publish(topic, b"not json", qos=1))
    for info in infos:
        info.wait_for_publish(10)
    device.disconnect()
    assert "y" in client_for("p").request({"x": [1, 1]}, timeout_s=30)

    names: set[str] = set()

    def scraped_all() -> bool:
        """Gauges that are None until the first train step come then."""
        for port in ports.values():
            names.update(exported(port))
        return "streamlearn_learner_online_loss" in names

    eventually(scraped_all, 30, "the learner's online loss")
    missing = {name: q for name, q in wanted.items() if name not in names}
    assert not missing, f"dashboard queries name metrics no worker exports: {missing}"
    for role, port in ports.items():
        ready = probe(port)
        assert ready.returncode == 0, f"{role}: {ready.stderr}"
    assert "no answer on port" in probe(free_port()).stderr


def test_prometheus_scrapes_every_role_compose_runs_on_its_metrics_port():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    roles = {
        name: service
        for name, service in compose["services"].items()
        if service.get("image", "").split(":")[0] in ("streamlearn", "streamlearn-actor")
    }
    assert {"ingest-1", "ingest-2", "learner", "learner-gpu", "actor"} <= set(roles)
    scrape = yaml.safe_load(PROMETHEUS.read_text())
    targets: dict[str, int] = {}
    for job in scrape["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            targets.update(dict.fromkeys(sd["names"], sd["port"]))
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                targets[host] = int(port)
    for name, service in roles.items():
        port = service["environment"].get("STREAMLEARN_METRICS_PORT")
        assert port is not None, f"{name}: metrics off"
        assert targets.get(name) == int(port), f"{name} not scraped on port {port}"
        # the roles listen on loopback by default: Prometheus, in another container, and
        # nobody else (no published port) reaches them through the compose network
        host = service["environment"].get("STREAMLEARN_METRICS_HOST")
        assert host == "0.0.0.0", f"{name}: metrics listen on {host or '127.0.0.1'}"
        assert "ports" not in service, f"{name}: metrics must not be published to the host"
        assert service["healthcheck"]["test"] == ["CMD", "streamlearn-healthcheck"]
    monitoring = {
        n for n, s in compose["services"].items() if "monitoring" in s.get("profiles", [])
    }
    assert monitoring == {"prometheus", "grafana"}
    grafana = compose["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:-}"
    assert "GRAFANA_ADMIN_PASSWORD=" in (ROOT / ".env.example").read_text()
    provisioned = ROOT / "deploy" / "grafana" / "provisioning"
    source = yaml.safe_load((provisioned / "datasources" / "prometheus.yml").read_text())
    uids = {d["uid"]: d["type"] for d in source["datasources"]}
    doc = json.loads(DASHBOARD.read_text())
    used = {t["datasource"]["uid"] for p in doc["panels"] for t in p.get("targets", [])}
    assert used == {"${datasource}"}, "every query reads the data source the viewer picks"
    (variable,) = [v for v in doc["templating"]["list"] if v["name"] == "datasource"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    # by default, the one compose provisions
    assert uids.get(variable["current"]["value"]) == "prometheus", variable["current"]


def test_the_dashboard_is_provisioned_from_where_compose_mounts_it():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/streamlearn.yml").read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert mounts["./deploy/grafana/dashboards"] == path
    assert Path(ROOT / "deploy/grafana/dashboards" / DASHBOARD.name).exists()
