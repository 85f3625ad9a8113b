"""Prometheus alerting rules (deploy/prometheus/alerts.yml): promtool checks them and runs
their unit tests (alerts_test.yml); every series an alert reads is one the real workers
serve; and a real Prometheus scraping real workers evaluates each alert: none on a healthy
stream, then dead letters, error replies, slow replies, a version the actor refuses (stale
weights), a full Redis, and a stopped learner and actor fire theirs.

promtool and prometheus come with Debian's `prometheus` package (`bash run.sh test`
installs it); the tests that run them are skipped, saying so, where it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis as redis_lib
import yaml
from prometheus_client.parser import text_string_to_metric_families

from streamlearn.online import codec
from streamlearn.stack import embedded
from streamlearn.stack.embedded import ServerProcess, free_port
from streamlearn.store.weights import WeightsStore
from tests.conftest import ROOT, Client, RoleProcess, eventually

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
TOML = """
[models.p]
inputs = 2
task = "binary"
hidden = [128, 128]  # a version's weights (~150 kB) take more memory than a few samples

[models.p.actor]
http_port = {http_port}
http_max_connections = 1  # a second connection held at once is answered 503
# A burst of requests is one batch, which waits for more while they keep arriving: up to
# 1 s after its first (a sequence of round trips finds the actor idle and waits for none).
max_batch = 1024
max_wait_ms = 1000
"""
ROLES = ("ingest", "learner", "actor")
# PromQL words that are not metric names: keywords and set operators.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
GROUPING = r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
SELECTOR = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:\\.|[^"\\])*)"')
Series = tuple[str, dict[str, str]]
# Series a worker serves only once something happened (none on a healthy stream).
LATER = {
    "streamlearn_ingest_deadletters_total": "its first dead letter",
    "streamlearn_learner_pinned_version": "a pinned version",
}
# Pending, in the real Prometheus, from a minute after the refused version on: beside the
# alerts the sections between bring about
STALE = {"ActorWeightsStale"}


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def selectors(expr: str) -> list[str]:
    """The series selectors of a PromQL expression: a metric name and its label matchers.

    >>> selectors('sum by (model) (rate(a_total{reason!="x"}[5m])) > 0 or on (model) b offset 1h')
    ['a_total{reason!="x"}', 'b']
    """
    expr = re.sub(r"\[[^\]]*\]", "", re.sub(GROUPING, "", expr))  # groupings, ranges
    found = []
    for m in SELECTOR.finditer(expr):
        name, matchers, call = m.groups()
        if not call and name.lower() not in KEYWORDS:
            found.append(name + (matchers or ""))
    return found


def matches(selector: str, series: Series) -> bool:
    """Whether a selector from `selectors` picks the series (name, labels).

    >>> matches('a{model=~"p|q", reason!="x"}', ("a", {"model": "p", "reason": "y"}))
    True
    """
    name, labels = series
    if name != selector.split("{")[0]:
        return False
    for label, op, value in MATCHER.findall(selector):
        got = labels.get(label, "")
        hit = re.fullmatch(value, got) is not None if "~" in op else got == value
        if hit == op.startswith("!"):
            return False
    return True


def at(timestamp: str) -> float:
    """Seconds since the epoch of an RFC 3339 time of the Prometheus API (nanoseconds: 9
    digits, which `fromisoformat` does not take before Python 3.12)."""
    timestamp = re.sub(r"(\.\d{6})\d+", r"\1", timestamp).replace("Z", "+00:00")
    return datetime.fromisoformat(timestamp).timestamp()


def scrape(port: int) -> list[Series]:
    """Every sample a worker's /metrics serves, as (name, labels)."""
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    families = text_string_to_metric_families(page.decode())
    return [(s.name, s.labels) for family in families for s in family.samples]


def promtool(*args: str | Path) -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found: install Debian's prometheus package (run.sh test does)")
    done = subprocess.run([found, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"promtool {' '.join(map(str, args))}:\n{done.stdout}{done.stderr}"
    return done.stdout


# -- the rules files ----------------------------------------------------------------------


def test_promtool_passes_the_rules_the_config_and_the_rules_unit_tests():
    assert f"SUCCESS: {len(alerts())} rules found" in promtool("check", "rules", RULES)
    # the config names the rules file, found beside it (as compose mounts them)
    assert "SUCCESS: 1 rule files found" in promtool("check", "config", PROMETHEUS)
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS)


def test_every_alert_waits_has_a_severity_names_its_model_and_is_unit_tested():
    tests = yaml.safe_load(RULE_TESTS.read_text())
    cases = [case for t in tests["tests"] for case in t["alert_rule_test"]]
    for rule in alerts():
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), f"{name}: no `for`"
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        for text in ("summary", "description"):
            assert "{{ $labels.model }}" in rule["annotations"][text], f"{name}: {text}"
        assert re.search(r"by \(([^)]*, )?model\b", rule["expr"]), f"{name}: one alert per model"
        runs = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in runs), f"{name}: no unit test fires it"
        assert any(not case["exp_alerts"] for case in runs), f"{name}: none where it stays quiet"


def test_compose_mounts_the_rules_where_the_config_names_them():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    service = compose["services"]["prometheus"]
    config = next(a.split("=", 1)[1] for a in service["command"] if a.startswith("--config.file"))
    mounts = dict(v.split(":")[:2] for v in service["volumes"])
    for rule_file in yaml.safe_load(PROMETHEUS.read_text())["rule_files"]:
        target = str(Path(config).parent / rule_file)  # relative to the config file
        source = ROOT / next(s for s, t in mounts.items() if t == target)
        assert source.resolve() == RULES.resolve(), f"{target} is not mounted from {RULES}"


# -- real workers -------------------------------------------------------------------------


def start_workers(
    start_role: Callable[..., RoleProcess], env: dict[str, str] | None = None
) -> tuple[dict[str, int], dict[str, RoleProcess]]:
    """ingest, learner and actor of model p (with `env`), each with its metrics port, the
    actor's HTTP door having answered one 503 (the series of the door's refusals starts
    with it); and the processes, by role."""
    ports = {role: free_port() for role in ROLES}
    door = free_port()
    toml = TOML.format(http_port=door)
    procs = {
        role: start_role(role, toml, env={**(env or {}), "STREAMLEARN_METRICS_PORT": str(port)})
        for role, port in ports.items()
    }
    with socket.create_connection(("127.0.0.1", door), timeout=10) as held:
        held.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        assert held.recv(1 << 16).startswith(b"HTTP/1.1 200")  # taken in: it holds the cap
        with socket.create_connection(("127.0.0.1", door), timeout=10) as refused:
            assert refused.recv(1 << 16).startswith(b"HTTP/1.1 503")
    return ports, procs


def value(ports: dict[str, int], role: str, name: str) -> float | None:
    """A sample's value from one worker's /metrics page (None while it has none)."""
    page = urllib.request.urlopen(f"http://127.0.0.1:{ports[role]}/metrics", timeout=5).read()
    for family in text_string_to_metric_families(page.decode()):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def healthy_stream(client: Client, ports: dict[str, int]) -> None:
    """200 samples trained on, then 20 predictions whose labels come later: the served
    score. Nothing invalid, nothing shed."""
    client.publish_samples([{"x": [i % 5, 1], "y": i % 2} for i in range(200)])
    eventually(
        lambda: (value(ports, "actor", "streamlearn_actor_version") or 0) >= 1, 60, "weights"
    )
    for i in range(20):
        client.device.predict("p", [i % 5, 1], id=f"r{i}")
    client.device.labels("p", [(f"r{i}", i % 2) for i in range(20)])
    eventually(
        lambda: value(ports, "learner", "streamlearn_learner_served_labels_total") == 20,
        30,
        "the served score of the 20 labels",
    )
    eventually(
        lambda: value(ports, "learner", "streamlearn_learner_samples_total") == 220,
        30,
        "the 200 samples and the 20 labelled ones trained on",
    )


def test_every_series_an_alert_reads_is_one_the_workers_serve(start_role, client_for):
    ports, _ = start_workers(start_role)
    client = client_for("p")
    healthy_stream(client, ports)
    client.publish_samples([b"not json"])  # the dead letters' series start with the first
    eventually(
        lambda: value(ports, "ingest", "streamlearn_ingest_deadletters_total") == 1,
        30,
        "a dead letter counted",
    )
    served = [series for port in ports.values() for series in scrape(port)]
    builds = {labels["role"]: labels for name, labels in served if name == "streamlearn_build_info"}
    assert set(builds) == set(ROLES), "every worker says which release it runs"
    assert all(
        b["model"] == "p" and re.fullmatch(r"\d+\.\d+.*", b["version"]) for b in builds.values()
    )
    learners = [labels for name, labels in served if name.startswith("streamlearn_learner_")]
    assert learners and all(labels["variant"] == "base" for labels in learners)
    for rule in alerts():
        found = selectors(rule["expr"])
        assert found, f"{rule['alert']}: no selector found in {rule['expr']}"
        for selector in found:
            if selector.split("{")[0] == "streamlearn_learner_pinned_version":
                continue  # served while a version is pinned
            assert any(matches(selector, s) for s in served), (
                f"{rule['alert']} reads {selector}, which no worker serves"
            )


# -- a real Prometheus --------------------------------------------------------------------


class Prometheus:
    """The HTTP API of a Prometheus server on 127.0.0.1:`port`."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/"

    def ready(self) -> bool:
        try:
            return urllib.request.urlopen(self.url + "-/ready", timeout=5).status == 200
        except urllib.error.HTTPError:  # 503 while it starts
            return False

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            doc = json.loads(urllib.request.urlopen(url, timeout=10).read())
        except urllib.error.HTTPError as exc:  # a query Prometheus refuses: 400 and why
            raise AssertionError(f"{path} {params}: {exc.read().decode()}") from None
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.get("rules")["groups"] for rule in group["rules"]]

    def active(self) -> dict[str, dict[str, Any]]:
        """The pending or firing alerts, by name."""
        return {a["labels"]["alertname"]: a for a in self.get("alerts")["alerts"]}


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, int]], Prometheus]]:
    """prometheus(ports) -> a Prometheus scraping each role's port every second and
    evaluating deploy/prometheus/alerts.yml every second; stopped after the test."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not found: install Debian's prometheus package (run.sh test does)")
    servers: list[ServerProcess] = []

    def start(ports: dict[str, int]) -> Prometheus:
        workdir = tmp_path / "prometheus"
        workdir.mkdir()
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": role, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for role, port in ports.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        argv = [
            "prometheus",
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        servers.append(ServerProcess("prometheus", argv, port, workdir).start(timeout_s=60))
        prom = Prometheus(port)
        eventually(prom.ready, 60, "Prometheus ready")  # it listens before its storage opens
        return prom

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[redis_lib.Redis]:
    """A redis-server of the test's own, to fill (the session's serves other tests). A test
    names it before `start_role`, so that its workers stop first."""
    with embedded.redis_server(workdir=tmp_path / "redis") as server:
        client = redis_lib.Redis(port=server.port)
        client.config_set("maxmemory-policy", "noeviction")
        yield client
        client.close()


def test_a_real_prometheus_evaluates_every_alert_on_real_workers(
    own_redis, start_role, client_for, prometheus
):
    port = own_redis.connection_pool.connection_kwargs["port"]
    ports, procs = start_workers(
        start_role, {"STREAMLEARN_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    )
    prom = prometheus(ports)
    eventually(
        lambda: sorted(r["value"][1] for r in prom.query("up")) == ["1"] * 3, 30, "3 targets up"
    )
    client = client_for("p")
    healthy_stream(client, ports)
    eventually(
        lambda: prom.query('streamlearn_learner_served_labels_total{model="p"} == 20'),
        30,
        "Prometheus scraped the served score",
    )

    rules = prom.rules()
    assert {r["name"] for r in rules} == {r["alert"] for r in alerts()}, "every alert loaded"
    since = max(at(r["lastEvaluation"]) for r in rules)
    for rule in alerts():
        for selector in selectors(rule["expr"]):
            if selector.split("{")[0] not in LATER:
                assert prom.get("series", **{"match[]": selector}), f"no series: {selector}"
        assert prom.query(rule["expr"]) == [], f"{rule['alert']} on a healthy stream"

    def evaluated() -> bool:
        """Every rule evaluated again since the stream, without error."""
        return all(at(r["lastEvaluation"]) > since for r in prom.rules())

    eventually(evaluated, 10, "every rule evaluated again")
    for rule in prom.rules():
        assert rule["health"] == "ok" and not rule.get("lastError"), rule
    assert prom.active() == {}, "no alert pending or firing on a healthy stream"

    # stale weights: a version of another layout (a learner of 3 inputs) lands in Redis;
    # the actor refuses it and goes on serving the one it loaded at the end of the healthy
    # stream. The alert waits for those weights to be a minute old (an actor's weights age
    # is since it loaded them, on its own clock): the sections below run meanwhile (none
    # publishes a version), and what is left of the minute is waited for after them.
    store = WeightsStore(own_redis, client.names)
    served_version = eventually(
        lambda: (
            value(ports, "actor", "streamlearn_actor_version") == store.latest_version()
            and store.latest_version()
        ),
        30,
        "the actor serving the latest version",
    )
    arrays, meta = codec.decode(store.fetch()[1])
    kernel = next(name for name, array in arrays.items() if array.shape == (2, 128))
    arrays[kernel] = np.zeros((3, 128), np.float32)
    stale, _ = store.publish(codec.encode(arrays, meta))  # a tool's publish: no lease
    eventually(
        lambda: value(ports, "actor", "streamlearn_actor_refused_versions_total") == 1,
        30,
        f"the actor refused v{stale}",
    )

    # dead letters: the first starts the series, the next ones make it rise
    client.publish_samples([b"not json"])
    eventually(
        lambda: prom.query("streamlearn_ingest_deadletters_total"), 30, "the dead letters' series"
    )
    client.publish_samples([b"not json", b"not json", b'{"x": [1], "y": 0}'])
    active = eventually(
        lambda: prom.active().get("DeadLettersRising"), 30, "DeadLettersRising pending"
    )
    assert active["state"] == "pending", "it fires after `for: 10m`"
    assert active["labels"]["model"] == "p" and active["labels"]["severity"] == "warning"
    assert "model p" in active["annotations"]["summary"]
    assert float(active["value"]) > 0
    assert set(prom.active()) - STALE == {"DeadLettersRising"}

    # requests of the wrong shape: 3 error replies of 23
    for _ in range(3):
        assert "error" in client.request({"x": [1, 2, 3]})

    # (a scrape may fall between an error's count and its reply's: 3 of 22, until the next)
    def error_ratio() -> dict[str, Any] | None:
        active = prom.active().get("ActorErrorRatio")
        return active if active and float(active["value"]) == pytest.approx(3 / 23) else None

    active = eventually(error_ratio, 30, "ActorErrorRatio at 3 of 23")
    assert active["state"] == "pending" and active["labels"]["model"] == "p"
    assert active["annotations"]["summary"].endswith("% of the replies of model p are errors")
    assert set(prom.active()) - STALE == {"DeadLettersRising", "ActorErrorRatio"}

    # slow replies: a burst of requests, over 1 a second on average (the 5 minutes' rate),
    # waits in the actor's batch (max_wait_ms) until over 1% of the replies took > 0.5 s
    def slow() -> bool:
        def count(le: str) -> float:
            name = "streamlearn_actor_request_latency_seconds_bucket"
            url = f"http://127.0.0.1:{ports['actor']}/metrics"
            page = urllib.request.urlopen(url, timeout=5).read()
            families = text_string_to_metric_families(page.decode())
            found = (s for f in families for s in f.samples if s.name == name)
            return next(s.value for s in found if s.labels["le"] == le)

        total, fast = count("+Inf"), count("0.5")
        if total > 330 and total - fast > 0.02 * total:
            return True
        burst = [client.device.predict_async("p", [i % 5, 1], timeout=30) for i in range(330)]
        for reply in burst:
            reply.result()
        return False

    eventually(slow, 60, "over 330 replies, over 2% of them slower than 0.5 s")
    active = eventually(lambda: prom.active().get("ActorLatencyHigh"), 30, "ActorLatencyHigh")
    assert active["state"] == "pending" and active["labels"]["model"] == "p"
    assert float(active["value"]) > 0.5
    assert active["annotations"]["summary"].startswith("Requests of model p take ")
    # the error replies are under 5% of all now
    assert set(prom.active()) - STALE == {"DeadLettersRising", "ActorLatencyHigh"}

    # stale weights, refused above: pending once the served weights are a minute old
    age = value(ports, "actor", "streamlearn_actor_weights_age_seconds") or 0
    active = eventually(
        lambda: prom.active().get("ActorWeightsStale"), 90 - age, "ActorWeightsStale pending"
    )  # at an age of 60 s, the next scrape and evaluation
    assert active["state"] == "pending" and active["labels"]["model"] == "p"
    assert float(active["value"]) == stale - served_version == 1
    assert active["annotations"]["summary"] == "Actors of model p serve weights 1 versions old"
    # the learner publishes again (a sample): the actor serves it, and the alert is gone
    client.publish_samples([{"x": [1, 1], "y": 1}])
    eventually(
        lambda: (value(ports, "actor", "streamlearn_actor_version") or 0) > stale, 30, "reload"
    )
    eventually(lambda: "ActorWeightsStale" not in prom.active(), 30, "ActorWeightsStale gone")
    assert set(prom.active()) == {"DeadLettersRising", "ActorLatencyHigh"}

    # Redis full (maxmemory, noeviction): room for a message of 10 samples, and the buffer
    # its write takes, none for the weights the learner publishes after them (a write's
    # arguments take memory first). A Redis whose memory moved meanwhile (buffers freed or
    # taken) is filled again.
    def oom() -> bool:
        return value(ports, "learner", "streamlearn_learner_redis_oom") == 1

    for _ in range(5):
        own_redis.config_set("maxmemory", own_redis.info("memory")["used_memory"] + 64 * 1024)
        client.publish_samples([{"x": [[i % 5, 1] for i in range(10)], "y": [1] * 10}])
        try:
            eventually(oom, 5, "the learner's writes refused for want of memory")
            break
        except AssertionError:
            continue
    active = eventually(lambda: prom.active().get("RedisOutOfMemory"), 30, "RedisOutOfMemory")
    assert active["state"] == "pending" and active["labels"]["model"] == "p"
    assert active["labels"]["severity"] == "critical"
    assert active["annotations"]["summary"] == "Redis refuses the writes of model p: out of memory"
    assert set(prom.active()) == {"DeadLettersRising", "ActorLatencyHigh", "RedisOutOfMemory"}
    own_redis.config_set("maxmemory", 0)  # room again: the learner's stop below writes

    # the learner and the actor stop: their series go stale; no learner, no ready actor
    procs["learner"].stop()
    procs["actor"].stop()
    for name, summary in [
        ("LearnerDown", "Learner of model p is down"),
        ("NoReadyActors", "No actor of model p is ready"),
    ]:
        active = eventually(lambda n=name: prom.active().get(n), 30, f"{name} pending")
        assert active["labels"]["model"] == "p" and active["labels"]["severity"] == "critical"
        assert active["annotations"]["summary"] == summary
