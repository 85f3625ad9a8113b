"""`streamlearn deploy k8s` (streamlearn.stack.k8s), rendered in-process: every model gets
its roles and every variant its learner, under names Kubernetes takes; the servers admit
the roles alone; a config the install cannot run fails naming its field. Each object's
schema (Kubernetes 1.30) is checked in tests/integration/test_k8s_manifests.py."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamlearn.cli.main import main
from streamlearn.config.loading import parse_config
from streamlearn.errors import ConfigError
from streamlearn.stack.k8s import Install, render, to_yaml
from streamlearn.stack.k8s.names import MAX_NAME, dns_name, is_dns_label
from tests.k8s_configs import TWO_MODELS

ROOT = Path(__file__).resolve().parents[2]
K8S_TOML = ROOT / "deploy" / "k8s" / "common" / "streamlearn.toml"
WORKLOADS = ("Deployment", "StatefulSet")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

Obj = dict[str, Any]


def rendered(text: str, install: Install | None = None) -> list[Obj]:
    parts = render(parse_config(tomllib.loads(text), "test"), text, install or Install())
    return [o for objs in parts.values() for o in objs]


@pytest.fixture(scope="module")
def two() -> list[Obj]:
    return rendered(TWO_MODELS, Install(broker=True, redis=True, monitoring=True))


def find(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pods(objs: list[Obj]) -> list[tuple[Obj, Obj]]:
    """(workload, pod template) of every workload."""
    return [(o, o["spec"]["template"]) for o in objs if o["kind"] in WORKLOADS]


def role_args(objs: list[Obj], role: str) -> list[list[str]]:
    return sorted(
        t["spec"]["containers"][0]["args"]
        for _, t in pods(objs)
        if t["metadata"]["labels"].get("app.kubernetes.io/component") == role
    )


# -- every model its roles, every variant its learner -------------------------------------


def test_every_model_gets_its_roles_and_every_variant_its_learner(two):
    config = "/etc/streamlearn/streamlearn.toml"
    assert role_args(two, "ingest") == [
        ["ingest", "--config", config, "--model", "Room_2"],
        ["ingest", "--config", config, "--model", "demo"],
    ]
    assert role_args(two, "actor") == [
        ["actor", "--config", config, "--model", "Room_2"],
        ["actor", "--config", config, "--model", "demo"],
    ]
    assert role_args(two, "learner") == [
        ["learner", "--config", config, "--model", "Room_2"],
        ["learner", "--config", config, "--model", "Room_2", "--variant", "Wide_1"],
        ["learner", "--config", config, "--model", "Room_2", "--variant", "fast"],
        ["learner", "--config", config, "--model", "demo"],
    ]
    for workload, _ in pods(two):
        role = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        if role in ("learner", "ingest"):
            assert workload["kind"] == "StatefulSet"
        if role == "learner":
            assert workload["spec"]["replicas"] == 1
    hpas = {h["spec"]["scaleTargetRef"]["name"] for h in find(two, "HorizontalPodAutoscaler")}
    actors = {w["metadata"]["name"] for w, t in pods(two) if w["kind"] == "Deployment"}
    assert hpas == actors and len(actors) == 2


def test_each_service_and_workload_selects_its_own_pods_only(two):
    templates = pods(two)
    for obj in two:
        if obj["kind"] == "Service":
            selector = obj["spec"]["selector"]
        elif obj["kind"] in (*WORKLOADS, "PodDisruptionBudget"):
            selector = obj["spec"]["selector"]["matchLabels"]
        else:
            continue
        selected = [w for w, t in templates if matches(selector, t["metadata"]["labels"])]
        assert len(selected) == 1, (obj["kind"], obj["metadata"]["name"], selected)
        if obj["kind"] in WORKLOADS:
            assert selected[0] is obj


def test_names_and_labels_are_what_kubernetes_takes_for_any_model_name():
    objs = rendered(TWO_MODELS.replace("Room_2", "_" + "R" * 63).replace("Wide_1", "W-" + "w" * 62))
    for obj in objs:
        name = obj["metadata"]["name"]
        assert is_dns_label(name) and len(name) <= MAX_NAME, name
        for value in obj["metadata"].get("labels", {}).values():
            assert len(value) <= 63 and LABEL_VALUE.match(value), value
    assert dns_name("actor", "Room_2") != dns_name("actor", "room-2"), "one name each"
    assert dns_name("actor", "demo") == "actor-demo", "a name Kubernetes takes is kept"


def test_the_config_map_is_the_config_as_given_mounted_where_the_roles_read(two):
    [config] = [c for c in find(two, "ConfigMap") if "streamlearn.toml" in c["data"]]
    assert config["data"]["streamlearn.toml"] == TWO_MODELS
    for _, template in pods(two):
        volumes = [v for v in template["spec"]["volumes"] if "configMap" in v]
        if template["metadata"]["labels"]["app.kubernetes.io/name"] == "streamlearn":
            assert [v["configMap"]["name"] for v in volumes] == [config["metadata"]["name"]]


# -- the actors: their doors, their image, their grace ------------------------------------


def test_actor_service_and_policy_open_exactly_the_doors_the_config_opens(two):
    services = {s["metadata"]["name"]: s for s in find(two, "Service")}
    demo = services[dns_name("actor", "demo")]
    assert {p["name"]: p["port"] for p in demo["spec"]["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 9100,
    }
    room = services[dns_name("actor", "Room_2")]
    assert [p["name"] for p in room["spec"]["ports"]] == ["metrics"]
    doors = {p["metadata"]["name"]: p for p in find(two, "NetworkPolicy")}
    [rule] = doors[dns_name("actor-http", "demo")]["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]
    assert dns_name("actor-http", "Room_2") not in doors, "no door, no policy"


def test_a_door_on_another_port_is_served_there():
    objs = rendered(TWO_MODELS.replace("http_port = 8000", "http_port = 9000"))
    name = dns_name("actor", "demo")
    [service] = [s for s in find(objs, "Service") if s["metadata"]["name"] == name]
    [(_, pod)] = [(w, t) for w, t in pods(objs) if w["metadata"]["name"] == name]
    declared = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    http = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    assert http["port"] == declared[http["targetPort"]] == 9000


def test_a_factory_models_actors_run_the_tensorflow_image_sized_to_it(two):
    images = {
        w["metadata"]["name"]: t["spec"]["containers"][0]
        for w, t in pods(two)
        if w["kind"] == "Deployment"
    }
    assert images[dns_name("actor", "demo")]["image"] == "streamlearn-actor:0.1.0"
    room = images[dns_name("actor", "Room_2")]
    assert room["image"] == "streamlearn:0.1.0"
    assert room["resources"]["limits"]["memory"] == "2Gi"


def test_the_grace_period_outlasts_the_prestop_and_the_models_drain():
    objs = rendered(TWO_MODELS.replace("http_port = 8000", "http_port = 8000\ndrain_s = 60"))
    [(_, demo)] = [
        (w, t) for w, t in pods(objs) if w["metadata"]["name"] == dns_name("actor", "demo")
    ]
    sleep = float(demo["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert demo["spec"]["terminationGracePeriodSeconds"] > sleep + 60


def test_images_from_a_registry_and_tag_and_the_autoscalers_bounds():
    objs = rendered(TWO_MODELS, Install(registry="r.example/team/", tag="1.2", actors=(3, 5)))
    images = {t["spec"]["containers"][0]["image"] for _, t in pods(objs)}
    assert images == {"r.example/team/streamlearn:1.2", "r.example/team/streamlearn-actor:1.2"}
    assert {
        (h["spec"]["minReplicas"], h["spec"]["maxReplicas"])
        for h in find(objs, "HorizontalPodAutoscaler")
    } == {(3, 5)}


# -- the opt-in overlays, laid over every model -------------------------------------------


def test_http_token_tls_and_gpu_reach_every_model():
    objs = rendered(TWO_MODELS, Install(http_token=True, tls=True, gpu=True))
    for workload, template in pods(objs):
        [c] = template["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        secrets = {v["secret"]["secretName"] for v in template["spec"]["volumes"] if "secret" in v}
        role = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        assert env["STREAMLEARN_MQTT_CA_FILE"] == "/etc/streamlearn-ca/ca.crt"
        assert "streamlearn-ca" in secrets
        assert ("STREAMLEARN_HTTP_TOKEN_FILE" in env) == (role == "actor")
        assert ("streamlearn-http-token" in secrets) == (role == "actor")
        assert ("nvidia.com/gpu" in c["resources"]["limits"]) == (role == "learner")
        if role == "learner":
            assert c["image"] == "streamlearn-gpu:0.1.0"
            assert c["args"][-2:] != ["--variant", "base"]


# -- the servers: the roles alone reach them ----------------------------------------------


def admitted(objs: list[Obj], labels: dict[str, str], port: int) -> list[Obj]:
    """The peers the NetworkPolicies admit to a pod with `labels` on `port`."""
    peers: list[Obj] = []
    for policy in find(objs, "NetworkPolicy"):
        if matches(policy["spec"]["podSelector"].get("matchLabels", {}), labels):
            for rule in policy["spec"].get("ingress", []):
                if any(p["port"] == port for p in rule["ports"]):
                    peers += rule["from"]
    return peers


def test_network_policies_admit_the_roles_alone_to_the_broker_and_redis(two):
    servers = {
        t["metadata"]["labels"]["app.kubernetes.io/name"]: t
        for w, t in pods(two)
        if w["metadata"]["name"] in ("mosquitto", "redis")
    }
    assert set(servers) == {"mosquitto", "redis"}
    for name, port in (("mosquitto", 1883), ("redis", 6379)):
        peers = admitted(two, servers[name]["metadata"]["labels"], port)
        assert peers and all(set(p) == {"podSelector"} for p in peers), peers  # this namespace
        for _, template in pods(two):
            labels = template["metadata"]["labels"]
            let_in = any(matches(p["podSelector"]["matchLabels"], labels) for p in peers)
            is_role = labels.get("app.kubernetes.io/component") in ("ingest", "learner", "actor")
            assert let_in == is_role, (name, labels)
        for other in (8883, 6379, 1883, 9100):
            if other != port and not (name == "mosquitto" and other == 8883):
                assert admitted(two, servers[name]["metadata"]["labels"], other) == []
    # the devices' TLS listener: from any address, as compose publishes it
    devices = admitted(two, servers["mosquitto"]["metadata"]["labels"], 8883)
    assert {p["ipBlock"]["cidr"] for p in devices} == {"0.0.0.0/0", "::/0"}


def test_servers_run_compose_files_and_the_scripts_secrets(two):
    maps = {c["metadata"]["name"].rsplit("-", 1)[0]: c["data"] for c in find(two, "ConfigMap")}
    deploy = ROOT / "deploy"
    assert maps["mosquitto-config"] == {
        "mosquitto.conf": (deploy / "mosquitto" / "mosquitto.conf").read_text(),
        "acl": (deploy / "mosquitto" / "acl").read_text(),
    }
    assert maps["redis-config"] == {"redis.conf": (deploy / "redis" / "redis.conf").read_text()}
    conf = {
        line.split()[0]: line.split()[1]
        for text in (maps["mosquitto-config"]["mosquitto.conf"], maps["redis-config"]["redis.conf"])
        for line in text.splitlines()
        if line.strip() and not line.startswith("#") and len(line.split()) > 1
    }
    for workload, template in pods(two):
        if workload["metadata"]["name"] not in ("mosquitto", "redis"):
            continue
        [c] = template["spec"]["containers"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        # every file the server's configuration names is mounted, from its ConfigMap or Secret
        files = [conf["password_file"], conf["acl_file"], conf["aclfile"], conf["certfile"]]
        own = [p for p in files if p.rpartition("/")[0] in mounts]
        assert len(own) == {"mosquitto": 3, "redis": 1}[workload["metadata"]["name"]], own
        for path in own:
            folder, _, key = path.rpartition("/")
            volume = volumes[mounts[folder]]
            if "secret" in volume:  # the whole Secret: make-certs.sh's files
                assert volume["secret"]["secretName"] == "streamlearn-mosquitto-certs"
                continue
            sources = volume["projected"]["sources"]
            keys = [i["key"] for s in sources for i in next(iter(s.values()))["items"]]
            assert key in keys, (path, keys)
        assert workload["spec"]["volumeClaimTemplates"], "its data on a volume"
        data = (
            conf["persistence_location"]
            if workload["metadata"]["name"] == "mosquitto"
            else conf["dir"]
        )
        assert data.rstrip("/") in mounts
        secrets = {
            s["secret"]["name"]
            for v in volumes.values()
            for s in v.get("projected", {}).get("sources", [])
            if "secret" in s
        }
        expected = {
            "mosquitto": {"streamlearn-mosquitto-passwd"},
            "redis": {"streamlearn-redis-acl"},
        }
        assert secrets == expected[workload["metadata"]["name"]]
    assert not find(two, "Secret"), "no password is rendered: the user makes the Secrets"


# -- monitoring ---------------------------------------------------------------------------


def test_monitoring_reads_the_alerts_and_the_dashboard_from_their_one_file(two):
    deploy = ROOT / "deploy"
    [rule] = find(two, "PrometheusRule")
    assert (
        rule["spec"]["groups"]
        == yaml.safe_load((deploy / "prometheus" / "alerts.yml").read_text())["groups"]
    )
    [dashboard] = [
        c for c in find(two, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    [(key, text)] = dashboard["data"].items()
    assert json.loads(text) == json.loads((deploy / "grafana" / "dashboards" / key).read_text())
    [monitor] = find(two, "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [t for _, t in pods(two) if matches(selector, t["metadata"]["labels"])]
    assert {t["metadata"]["labels"]["app.kubernetes.io/component"] for t in scraped} == {
        "ingest",
        "learner",
        "actor",
    }
    for template in scraped:
        ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
    assert not find(rendered(TWO_MODELS), "PodMonitor"), "opt-in"


# -- what fails, and says where -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (('http_host = "0.0.0.0"', 'http_host = "127.0.0.1"'), "models.demo.actor.http_host"),
        (("http_port = 8000", "http_port = 0"), "models.demo.actor.http_port"),
        (
            (
                "learning_rate = 0.01",
                'learning_rate = 0.01\nmemory = 0\nlearner = {distribute = "multi_worker"}',
            ),
            "models.Room_2.variants.fast.learner.distribute",
        ),
    ],
)
def test_a_config_the_install_cannot_run_fails_naming_the_field(change, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        rendered(TWO_MODELS.replace(*change))


def test_two_names_that_meet_in_one_object_are_refused():
    text = (
        "[models.a]\ninputs = 1\n[models.a.variants.b-c]\n"
        "[models.a-b]\ninputs = 1\n[models.a-b.variants.c]\n"
    )
    with pytest.raises(ConfigError, match="learner-a-b-c"):
        rendered(text)


# -- the command ---------------------------------------------------------------------------


def test_the_command_writes_the_install_and_round_trips_as_yaml(tmp_path, capsys):
    config = tmp_path / "streamlearn.toml"
    config.write_text(K8S_TOML.read_text())
    out = tmp_path / "k8s"
    (out).mkdir()
    (out / "09-model-gone.yaml").write_text("stale")
    argv = ["deploy", "k8s", "--config", str(config), "--redis", "--out", str(out)]
    assert main(argv) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["00-namespace.yaml", "01-config.yaml", "02-model-demo.yaml", "03-redis.yaml"]
    assert main(argv[:-2]) == 0
    streamed = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    written = [d for f in files for d in yaml.safe_load_all((out / f).read_text()) if d]
    assert streamed == written
    assert streamed == rendered(K8S_TOML.read_text(), Install(redis=True))
    assert main([*argv[:-2], "--actors", "8:2"]) == 2
    assert "--actors must be MIN:MAX" in capsys.readouterr().err
    assert yaml.safe_load_all(to_yaml([{"a": "x\ny\n"}])).__next__() == {"a": "x\ny\n"}
