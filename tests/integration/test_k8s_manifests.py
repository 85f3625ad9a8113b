"""The Kubernetes manifests (deploy/k8s): rendered by a real kustomize, every object validated
against a pinned Kubernetes version's schema, and checked for what a user would notice.

No cluster: `kubectl kustomize` (or `kustomize build`) renders offline, and
`kubernetes_validate` checks each object against the API's JSON schema in strict mode, so a
misspelt or misplaced field fails. `bash run.sh test` installs kubectl (Debian's
kubernetes-client) where neither is on PATH. The kustomizations are written for kustomize
2.0.3 (that kubectl's) and 5.x alike.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from streamlearn.config import load_config
from streamlearn.config.settings import load_settings
from streamlearn.config.tfconfig import PUBLIC_ENV, Workers
from streamlearn.errors import ConfigError
from tests.k8s_configs import TWO_MODELS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The oldest Kubernetes the manifests claim (docs/kubernetes.md); kubernetes-validate>=1.30
# (pyproject.toml's `test` extra) has its schema.
KUBERNETES_VERSION = "1.30"
# Every kustomization: the base and each overlay, found, so a new overlay is checked too.
TARGETS = ["base", *sorted(p.parent.name for p in K8S.glob("overlays/*/kustomization.yaml"))]
ROLES = ("ingest", "learner", "actor")
WORKLOADS = ("Deployment", "StatefulSet", "Job")
METRICS_PORT = 9100
HTTP_PORT = 8000
GRPC_PORT = 8001
# The namespace label the API server sets (Kubernetes 1.21+): a name no user can forge.
NAMESPACE_NAME = "kubernetes.io/metadata.name"

Obj = dict[str, Any]


def kustomize() -> list[str]:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    pytest.fail("no kustomize and no kubectl on PATH: `bash run.sh test` installs kubectl")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    """Each target's objects, rendered from a copy whose secrets are the committed examples
    (never a user's filled-in secrets/*.env)."""
    tree = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("*.env"))
    for example in tree.rglob("secrets/*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    out = {}
    for target in TARGETS:
        where = tree / target if target == "base" else tree / "overlays" / target
        done = subprocess.run(
            [*kustomize(), str(where)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{target} does not render:\n{done.stderr}"
        out[target] = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
        for doc in out[target]:  # whole objects (kustomize 2.0.3 leaves husks of `$patch: delete`)
            assert {"apiVersion", "kind"} <= set(doc) and doc["metadata"].get("name"), doc
    return out


def find(objs: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
    return found[0]


def generated(objs: list[Obj], kind: str, name: str) -> Obj:
    """A generator's object, by its name before the content hash."""
    found = [
        o
        for o in find(objs, kind)
        if re.fullmatch(rf"{name}-[a-z0-9]{{10}}", o["metadata"]["name"])
    ]
    assert len(found) == 1, f"expected one generated {kind} {name}-<hash>, got {found}"
    return found[0]


def pods(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, pod template) of every workload."""
    for o in objs:
        if o["kind"] in WORKLOADS:
            yield o, o["spec"]["template"]


def role(template: Obj) -> str:
    return template["metadata"]["labels"]["app.kubernetes.io/component"]


def role_pod(objs: list[Obj], name: str) -> tuple[Obj, Obj]:
    found = [(w, t) for w, t in pods(objs) if role(t) == name]
    assert len(found) == 1, f"expected one {name} workload, got {[w['kind'] for w, _ in found]}"
    return found[0]


def env_of(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


def matches(selector: Obj, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is evaluated here: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def dockerfile() -> tuple[int, str]:
    """The image's uid and HOME (deploy/Dockerfile)."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    uid = re.search(r"^USER (\d+):\d+$", text, re.M)
    home = re.search(r"\bHOME=(\S+)", text)
    assert uid and home, "deploy/Dockerfile no longer says USER uid:gid and HOME="
    return int(uid[1]), home[1]


# -- every object is valid Kubernetes ----------------------------------------------------------


def validate(obj: Obj, where: str) -> None:
    """Fails, saying where and what, unless `obj` is valid in the pinned Kubernetes."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{where}: {exc.message}")


@pytest.mark.parametrize("target", TARGETS)
def test_every_object_validates_against_the_pinned_kubernetes(rendered, target):
    kinds = set()
    for obj in rendered[target]:
        where = f"{target}: {obj['kind']} {obj['metadata']['name']}"
        validate(obj, where)
        assert obj["metadata"].get("namespace", "streamlearn") == "streamlearn", where
        kinds.add(obj["kind"])
    assert {"Namespace", "ConfigMap", "Secret", "Service", "NetworkPolicy"} <= kinds
    assert {"HorizontalPodAutoscaler", "StatefulSet", "Deployment"} <= kinds


# -- the pods: probes, ports, metrics, security --------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_probes_ask_livez_and_readyz_on_a_port_the_container_declares(rendered, target):
    for workload, template in pods(rendered[target]):
        for c in template["spec"]["containers"]:
            declared = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert declared["metrics"] == METRICS_PORT, workload["metadata"]["name"]
            for probe, path in (
                ("startupProbe", "/livez"),
                ("livenessProbe", "/livez"),
                ("readinessProbe", "/readyz"),
            ):
                get = c[probe]["httpGet"]
                assert get["path"] == path, (c["name"], probe)
                port = get["port"]
                assert port in declared or port in declared.values(), (c["name"], probe, port)
                assert declared.get(port, port) == METRICS_PORT


@pytest.mark.parametrize("target", TARGETS)
def test_metrics_served_on_every_address_and_announced_to_prometheus(rendered, target):
    for _, template in pods(rendered[target]):
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(METRICS_PORT)
        assert annotations["prometheus.io/path"] == "/metrics"
        for c in template["spec"]["containers"]:
            env = env_of(c)
            assert env["STREAMLEARN_METRICS_PORT"]["value"] == str(METRICS_PORT)
            assert env["STREAMLEARN_METRICS_HOST"]["value"] == "0.0.0.0"


@pytest.mark.parametrize("target", TARGETS)
def test_pods_run_as_the_images_user_with_nothing_to_spare(rendered, target):
    """What compose asks (cap_drop ALL, no-new-privileges) and the `restricted` Pod Security
    Standard that the namespace enforces; a read-only root with the image's HOME and /tmp
    writable."""
    uid, home = dockerfile()
    namespace = one(rendered[target], "Namespace", "streamlearn")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for workload, template in pods(rendered[target]):
        spec = template["spec"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == uid
        assert pod["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["automountServiceAccountToken"] is False
        volumes = {v["name"] for v in spec["volumes"]}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            assert {home, "/tmp"} <= set(mounts), workload["metadata"]["name"]
            assert not mounts[home].get("readOnly") and mounts[home]["name"] in volumes
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
            assert {"cpu", "memory"} <= set(c["resources"]["limits"])


@pytest.mark.parametrize("target", TARGETS)
def test_each_role_gets_only_its_own_secret_and_every_key_exists(rendered, target):
    objs = rendered[target]
    for _, template in pods(objs):
        name = role(template)
        secret = generated(objs, "Secret", f"streamlearn-{name}")
        env = env_of(template["spec"]["containers"][0])
        refs = [
            e["valueFrom"]["secretKeyRef"]
            for e in env.values()
            if "secretKeyRef" in e.get("valueFrom", {})
        ]
        assert {r["key"] for r in refs} == {"STREAMLEARN_MQTT_URL", "STREAMLEARN_REDIS_URL"}
        for ref in refs:
            assert ref["name"] == secret["metadata"]["name"], f"{name} reads {ref['name']}"
            assert ref["key"] in secret["data"]


def test_committed_secrets_are_placeholders_only():
    examples = sorted((K8S / "common" / "secrets").glob("*.env.example"))
    assert [p.name.split(".")[0] for p in examples] == sorted(ROLES)
    for path in examples:
        lines = [x for x in path.read_text().splitlines() if x and not x.startswith("#")]
        for line in lines:
            name, _, url = line.partition("=")
            who = path.name.split(".")[0]
            assert url.split("://")[1].startswith(f"{who}:change-me-"), (path.name, name)
    # the HTTP door's token: empty, so that an actor given the example refuses to start
    [token] = (K8S / "overlays" / "http-token" / "secrets").glob("*.env.example")
    lines = [x for x in token.read_text().splitlines() if x and not x.startswith("#")]
    assert lines == ["token="]
    for folder in (K8S / "common" / "secrets", token.parent):
        assert "*.env" in (folder / ".gitignore").read_text().split()


# -- the roles -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_ingest_workers_keep_their_mqtt_session_names(rendered, target):
    """A StatefulSet: pod names ingest-0, ingest-1 survive re-creation, and name the
    workers' persistent sessions (compose's fixed STREAMLEARN_INSTANCE per service)."""
    workload, template = role_pod(rendered[target], "ingest")
    assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 2
    instance = env_of(template["spec"]["containers"][0])["STREAMLEARN_INSTANCE"]
    assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    service = one(rendered[target], "Service", workload["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert matches({"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"])


@pytest.mark.parametrize("target", TARGETS)
def test_actor_service_reaches_actor_pods_only_on_their_declared_ports(rendered, target):
    objs = rendered[target]
    service = one(objs, "Service", "actor")
    assert service["spec"]["type"] == "ClusterIP"
    selector = {"matchLabels": service["spec"]["selector"]}
    for _, template in pods(objs):
        selected = matches(selector, template["metadata"]["labels"])
        assert selected == (role(template) == "actor"), role(template)
    _, template = role_pod(objs, "actor")
    declared = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["http"]["port"] == HTTP_PORT and declared[ports["http"]["targetPort"]] == HTTP_PORT
    assert ports["grpc"]["port"] == GRPC_PORT and declared[ports["grpc"]["targetPort"]] == GRPC_PORT
    assert declared[ports["metrics"]["targetPort"]] == METRICS_PORT


@pytest.mark.parametrize("target", TARGETS)
def test_actors_scale_on_cpu_from_two(rendered, target):
    objs = rendered[target]
    hpa = one(objs, "HorizontalPodAutoscaler", "actor")
    ref = hpa["spec"]["scaleTargetRef"]
    actor = one(objs, ref["kind"], ref["name"])
    assert role(actor["spec"]["template"]) == "actor"
    assert "replicas" not in actor["spec"], "the HPA owns the count; apply would reset it"
    assert hpa["spec"]["minReplicas"] == 2 <= hpa["spec"]["maxReplicas"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert actor["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "multi-worker"])
def test_one_learner_never_two(rendered, target):
    """A StatefulSet of one: a deleted pod's replacement waits for it to be gone (a
    Deployment's starts beside it); the lease in Redis fences whatever slips through."""
    objs = rendered[target]
    workload, template = role_pod(objs, "learner")
    assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 1
    assert workload["spec"].get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    service = one(objs, "Service", workload["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert matches({"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"])
    assert not find(objs, "Deployment", "learner")
    _, home = dockerfile()
    [mount] = [
        m for m in template["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == home
    ]
    [volume] = [v for v in template["spec"]["volumes"] if v["name"] == mount["name"]]
    one(objs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


def test_gpu_overlay_puts_the_learner_alone_on_a_gpu(rendered):
    objs = rendered["gpu"]
    _, learner = role_pod(objs, "learner")
    spec = learner["spec"]
    [c] = spec["containers"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == 1
    assert spec["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    cpu_image = role_pod(rendered["base"], "learner")[1]["spec"]["containers"][0]["image"]
    assert c["image"].split(":")[0] == "streamlearn-gpu"
    assert c["image"].split(":")[1] == cpu_image.split(":")[1], "same release as the CPU image"
    for name, image in (("ingest", cpu_image), ("actor", "streamlearn-actor:0.1.0")):
        _, template = role_pod(objs, name)
        [other] = template["spec"]["containers"]
        assert other["image"] == image and "nvidia.com/gpu" not in other["resources"]["limits"]


def test_actors_run_the_image_without_tensorflow_sized_to_it(rendered):
    """The actor's image is the TensorFlow-free target (deploy/Dockerfile `actor`), and its
    memory is sized to that (about 80 MB resident, bench.serve), not to TensorFlow's."""
    _, template = role_pod(rendered["base"], "actor")
    [c] = template["spec"]["containers"]
    assert c["image"].split(":")[0] == "streamlearn-actor"
    assert c["resources"]["requests"]["memory"] == "128Mi"
    assert c["resources"]["limits"]["memory"] == "384Mi"


@pytest.mark.parametrize("target", TARGETS)
def test_actors_leave_the_service_before_their_sigterm_and_drain_within_their_grace(
    rendered, target, tmp_path
):
    """A rollout loses no request (docs/kubernetes.md, "Rollouts"): the preStop sleep lets
    the Service drop the pod before its SIGTERM, and the grace period outlasts that sleep
    plus the actor's drain (`actor.drain_s` of the pod's own config)."""
    objs = rendered[target]
    _, template = role_pod(objs, "actor")
    [c] = template["spec"]["containers"]
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and 0 < float(command[1]) <= 15, command
    [(key, text)] = generated(objs, "ConfigMap", "streamlearn-config")["data"].items()
    (tmp_path / key).write_text(text)
    drain_s = load_config(tmp_path / key).model("demo").actor.drain_s
    assert template["spec"]["terminationGracePeriodSeconds"] > float(command[1]) + drain_s
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"  # unready once stopping


# -- the config ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_config_map_is_mounted_where_args_read_it_and_loads(rendered, target, tmp_path):
    objs = rendered[target]
    config = generated(objs, "ConfigMap", "streamlearn-config")
    [(key, text)] = config["data"].items()
    for _, template in pods(objs):
        spec = template["spec"]
        [volume] = [v for v in spec["volumes"] if "configMap" in v]
        assert volume["configMap"]["name"] == config["metadata"]["name"]
        c = spec["containers"][0]
        [mount] = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
        path = f"{mount['mountPath']}/{key}"
        if "command" in c:  # the multi-worker script: what it runs is checked below
            assert f'"{path}"' in c["args"][0]
        else:
            assert c["args"][c["args"].index("--config") + 1] == path
    path = tmp_path / key
    path.write_text(text)
    model = load_config(path).model("demo")
    # The actors' Open Inference Protocol door ([models.demo.actor] http_port, http_host),
    # added to ActorConfig alongside these manifests: the actor Service's port 8000.
    assert model.actor.http_port == HTTP_PORT
    assert model.actor.http_host == "0.0.0.0"
    assert (model.actor.grpc_port, model.actor.grpc_host) == (GRPC_PORT, "0.0.0.0")


def test_k8s_config_is_composes_with_the_http_door():
    compose = tomllib.loads((ROOT / "deploy" / "streamlearn.toml").read_text())
    base = tomllib.loads((K8S / "common" / "streamlearn.toml").read_text())
    actor = base["models"]["demo"]["actor"]
    assert actor == {
        "http_port": HTTP_PORT,
        "http_host": "0.0.0.0",
        "grpc_port": GRPC_PORT,
        "grpc_host": "0.0.0.0",
    }
    assert base == compose
    multi = tomllib.loads((K8S / "overlays" / "multi-worker" / "streamlearn.toml").read_text())
    demo = multi["models"]["demo"]
    assert demo["actor"] == actor
    assert demo.pop("ingest").keys() == {"partitions"}
    assert demo.pop("learner").keys() == {"distribute", "max_batch"}
    assert multi == compose


# -- the network -----------------------------------------------------------------------------


def admitted(objs: list[Obj], labels: dict[str, str]) -> dict[int, list[Obj]]:
    """Port -> the peers NetworkPolicies admit to a pod with these labels (ingress)."""
    ports: dict[int, list[Obj]] = {}
    selected = False
    for policy in find(objs, "NetworkPolicy"):
        spec = policy["spec"]
        if "Ingress" not in spec["policyTypes"] or not matches(spec["podSelector"], labels):
            continue
        selected = True
        for rule in spec.get("ingress", []):
            assert rule.get("from") and rule.get("ports"), f"{policy['metadata']['name']} opens all"
            for port in rule["ports"]:
                ports.setdefault(port["port"], []).extend(rule["from"])
    assert selected, f"no NetworkPolicy denies by default to {labels}"
    return ports


@pytest.mark.parametrize("target", TARGETS)
def test_network_policies_admit_metrics_the_doors_and_workers_only(rendered, target):
    objs = rendered[target]
    prometheus = [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    for workload, template in pods(objs):
        ports = admitted(objs, template["metadata"]["labels"])
        assert ports.pop(METRICS_PORT) == prometheus
        if role(template) == "actor":
            http = ports.pop(HTTP_PORT)
            assert {"podSelector": {}} in http and ports.pop(GRPC_PORT) == http  # both doors
        if workload["kind"] == "Job":
            peer = {"matchLabels": workload["spec"]["template"]["metadata"]["labels"]}
            only_learners = ports.pop(2222)
            assert only_learners and all(set(p) == {"podSelector"} for p in only_learners)
            assert all(matches(p["podSelector"], peer["matchLabels"]) for p in only_learners)
        assert ports == {}, f"{role(template)}: more is open: {ports}"


@pytest.mark.parametrize("target", TARGETS)
def test_every_peer_a_network_policy_admits_is_pinned_to_a_namespace(rendered, target):
    """A pod label is anyone's to set who may create a pod somewhere: every peer is a pod
    of this namespace, or of one named by `kubernetes.io/metadata.name` (set by the API
    server, not by a user) and labelled as well; never any namespace, never any address."""
    for policy in find(rendered[target], "NetworkPolicy"):
        for rule in policy["spec"].get("ingress", []):
            for peer in rule["from"]:
                where = (policy["metadata"]["name"], peer)
                if set(peer) == {"podSelector"}:
                    continue  # the policy's own namespace
                assert set(peer) == {"namespaceSelector", "podSelector"}, where
                assert set(peer["namespaceSelector"]) == {"matchLabels"}, where
                assert list(peer["namespaceSelector"]["matchLabels"]) == [NAMESPACE_NAME], where
                assert peer["podSelector"].get("matchLabels"), where


# -- opt-in: the HTTP door's token, TLS to the servers -------------------------------------


def mounted_file(template: Obj, container: Obj, path: str) -> tuple[Obj, Obj]:
    """The (volume, mount) that puts a file at `path` in `container`."""
    mounts = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert len(mounts) == 1, f"{container['name']}: nothing mounted at {path}"
    [volume] = [v for v in template["spec"]["volumes"] if v["name"] == mounts[0]["name"]]
    return volume, mounts[0]


def test_http_token_overlay_gives_the_actor_its_token_file_and_nobody_else(
    rendered, tmp_path, monkeypatch
):
    """The overlay mounts Secret streamlearn-http-token read-only into the actors and points
    STREAMLEARN_HTTP_TOKEN_FILE at its key `token`; the actor's settings read it at start,
    and refuse the committed (empty) example. Without the overlay, no token: opt-in."""
    objs = rendered["http-token"]
    secret = generated(objs, "Secret", "streamlearn-http-token")
    for _, template in pods(objs):
        [c] = template["spec"]["containers"]
        env = env_of(c)
        if role(template) != "actor":
            assert "STREAMLEARN_HTTP_TOKEN_FILE" not in env
            assert all(
                v.get("secret", {}).get("secretName") != secret["metadata"]["name"]
                for v in template["spec"]["volumes"]
            )
            continue
        path = env["STREAMLEARN_HTTP_TOKEN_FILE"]["value"]
        volume, mount = mounted_file(template, c, path)
        assert mount["readOnly"] is True
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        key = path.rsplit("/", 1)[1]
        assert key == "token" and key in secret["data"]
        assert not volume["secret"].get("optional"), "a missing Secret must not mean no token"
        stored = tmp_path / "token"
        stored.write_bytes(base64.b64decode(secret["data"][key]))
        monkeypatch.delenv("STREAMLEARN_HTTP_TOKEN", raising=False)
        monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN_FILE", str(stored))
        with pytest.raises(ConfigError, match="HTTP_TOKEN_FILE"):
            load_settings()
        stored.write_text("s3cret-token\n")
        assert load_settings().bearer_token == "s3cret-token"
    for target in ("base", "gpu", "multi-worker"):
        _, template = role_pod(rendered[target], "actor")
        assert "STREAMLEARN_HTTP_TOKEN_FILE" not in env_of(template["spec"]["containers"][0])


def test_tls_overlay_gives_every_role_the_servers_ca(rendered):
    """Every role trusts the CA of Secret streamlearn-ca (key ca.crt), mounted read-only:
    STREAMLEARN_MQTT_CA_FILE for mqtts://, and the same file for rediss:// (the URL's
    `ssl_ca_certs`, docs/kubernetes.md)."""
    objs = rendered["tls"]
    for _, template in pods(objs):
        [c] = template["spec"]["containers"]
        path = env_of(c)["STREAMLEARN_MQTT_CA_FILE"]["value"]
        volume, mount = mounted_file(template, c, path)
        assert mount["readOnly"] is True
        assert volume["secret"]["secretName"] == "streamlearn-ca"
        assert volume["secret"]["items"] == [{"key": "ca.crt", "path": path.rsplit("/", 1)[1]}]
    examples = (K8S / "overlays" / "tls" / "kustomization.yaml").read_text()
    for scheme in ("mqtts://", "rediss://"):
        assert scheme in examples, f"the overlay shows a {scheme} URL"
    assert f"ssl_ca_certs={path}" in examples


# -- the multi-host learner ------------------------------------------------------------------


def test_multi_worker_builds_tf_config_from_the_completion_index(rendered, tmp_path):
    """The Job's own script, run with a stand-in `streamlearn` that records what it got:
    each index gets a TF_CONFIG that the learner's parser accepts, naming every worker pod."""
    objs = rendered["multi-worker"]
    assert not find(objs, "StatefulSet", "learner") and not find(objs, "PersistentVolumeClaim")
    job = one(objs, "Job", "learner")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    service = one(objs, "Service", pod["subdomain"])
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    [c] = pod["containers"]
    env = env_of(c)
    assert env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )
    assert env["LEARNER_SERVICE"]["value"] == pod["subdomain"]
    assert int(env["LEARNER_WORKERS"]["value"]) == spec["completions"]
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["tf-grpc"]
    assert c["command"] == ["python", "-c"]
    [script] = c["args"]
    assert "$(" not in script, "Kubernetes would expand $(...) in args"

    stand_in = tmp_path / "streamlearn"
    stand_in.write_text('#!/bin/sh\nprintf \'%s\\n\' "$TF_CONFIG" "$*" > "$RECORD"\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IEXEC)
    plain = {k: e["value"] for k, e in env.items() if "value" in e}
    hosts = [f"learner-{i}.{pod['subdomain']}:{port}" for i in range(spec["completions"])]
    for index in range(spec["completions"]):
        record = tmp_path / f"worker-{index}"
        run_env = {
            **plain,
            "JOB_NAME": job["metadata"]["name"],
            "JOB_COMPLETION_INDEX": str(index),
            "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
            "RECORD": str(record),
        }
        subprocess.run([sys.executable, "-c", script], env=run_env, check=True, timeout=30)
        tf_config, args = record.read_text().splitlines()
        # The names resolve only inside the cluster; refuse_public is tested in test_tfconfig.
        workers = Workers.from_env({"TF_CONFIG": tf_config, PUBLIC_ENV: "allow"})
        assert (workers.count, workers.index) == (spec["completions"], index)
        assert json.loads(tf_config)["cluster"]["worker"] == hosts
        assert args == "learner --config /etc/streamlearn/streamlearn.toml"

    config = generated(objs, "ConfigMap", "streamlearn-config")
    model = tomllib.loads(config["data"]["streamlearn.toml"])["models"]["demo"]
    assert model["learner"]["distribute"] == "multi_worker"
    assert model["ingest"]["partitions"] >= spec["completions"]


# -- `streamlearn deploy k8s`: the install rendered from a config ------------------------------

# CI's three installs: one model (the kustomize tree's config), two models with a variant,
# and the broker and Redis beside them, with every opt-in (tests/unit/test_k8s_install.py
# checks what each holds; here, that Kubernetes takes every object).
INSTALLS = {
    "one-model": ((K8S / "common" / "streamlearn.toml").read_text(), {}),
    "two-models-variant": (TWO_MODELS, {}),
    "broker-redis": (
        TWO_MODELS,
        dict.fromkeys(("broker", "redis", "monitoring", "http_token", "tls", "gpu"), True),
    ),
}
CONFIG_KEY = "streamlearn.toml"  # the ConfigMap's key the roles' --config reads
# The Prometheus Operator's kinds (CRDs, not in Kubernetes' schemas): what each must hold.
CRD_REQUIRED = {"PodMonitor": ("selector", "podMetricsEndpoints"), "PrometheusRule": ("groups",)}


@pytest.fixture(scope="module")
def installs() -> dict[str, list[Obj]]:
    from streamlearn.config.loading import parse_config
    from streamlearn.stack.k8s import Install, render, to_yaml

    out = {}
    for name, (text, flags) in INSTALLS.items():
        parts = render(parse_config(tomllib.loads(text), name), text, Install(**flags))
        stream = to_yaml([o for objs in parts.values() for o in objs])
        out[name] = [doc for doc in yaml.safe_load_all(stream) if doc]  # as kubectl reads it
    return out


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_every_rendered_object_validates_against_the_pinned_kubernetes(installs, install):
    crds = set()
    for obj in installs[install]:
        where = f"{install}: {obj['kind']} {obj['metadata']['name']}"
        assert obj["metadata"].get("namespace") == "streamlearn" or obj["kind"] == "Namespace"
        if obj["kind"] in CRD_REQUIRED:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1", where
            assert set(CRD_REQUIRED[obj["kind"]]) <= set(obj["spec"]), where
            crds.add(obj["kind"])
            continue
        validate(obj, where)
    assert crds == (set(CRD_REQUIRED) if INSTALLS[install][1].get("monitoring") else set())


def test_the_prometheus_rule_holds_rules_the_operator_takes(installs):
    """The Operator's schema (monitoring.coreos.com/v1, PrometheusRule): each group a name
    and rules; each rule an `expr` and exactly one of `alert` or `record`, nothing else
    but `for`, `keep_firing_for`, `labels` and `annotations` (strings)."""
    [rule] = [o for o in installs["broker-redis"] if o["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"]
    allowed = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        assert set(group) <= {"name", "interval", "rules", "limit", "partial_response_strategy"}
        for r in group["rules"]:
            assert set(r) <= allowed and isinstance(r["expr"], str), r
            assert ("alert" in r) != ("record" in r), r
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in r.get(key, {}).values()), r
    [monitor] = [o for o in installs["broker-redis"] if o["kind"] == "PodMonitor"]
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scheme"}


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_every_rendered_config_map_config_loads(installs, install, tmp_path):
    [config] = [
        o for o in installs[install] if o["kind"] == "ConfigMap" and CONFIG_KEY in o["data"]
    ]
    path = tmp_path / CONFIG_KEY
    path.write_text(config["data"][CONFIG_KEY])
    assert set(load_config(path).models) == set(tomllib.loads(INSTALLS[install][0])["models"])


def test_make_secrets_writes_every_secret_the_install_names_with_the_keys_it_reads(
    installs, tmp_path
):
    """deploy/k8s/make-secrets.sh, run as a user would (the passwords in the environment,
    the certificates of make-certs.sh): every Secret the broker-and-Redis install reads is
    there with each key it reads, valid, and the roles' URLs name the install's Services
    with each role's own account."""
    passwords = {
        f"{server}_{role.upper()}_PASSWORD": f"{server.lower()}-{role}-0123456789abcdef"
        for server in ("MQTT", "REDIS")
        for role in ROLES
    }
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("ca.crt", "server.crt", "server.key"):
        (certs / name).write_text(f"not a real {name}\n")
    env = {
        "PATH": os.environ["PATH"],
        "MQTT_CERTS_DIR": str(certs),
        "MQTT_DEVICES_FILE": str(tmp_path / "no-devices"),
        "HTTP_TOKEN": "t" * 64,
        **passwords,
    }
    done = subprocess.run(
        [str(K8S / "make-secrets.sh"), "--broker", "--redis", "--http-token"],
        cwd=tmp_path,  # no ./.env of the checkout
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    secrets = {}
    for doc in yaml.safe_load_all(done.stdout):
        if doc:
            validate(doc, f"make-secrets.sh: {doc['metadata']['name']}")
            data = {k: base64.b64decode(v).decode() for k, v in doc["data"].items()}
            secrets[doc["metadata"]["name"]] = data
            assert doc["metadata"]["namespace"] == "streamlearn"

    objs = installs["broker-redis"]
    wanted: dict[str, set[str]] = {}
    for _, template in pods(objs):
        spec = template["spec"]
        for e in spec["containers"][0].get("env", []):
            if ref := e.get("valueFrom", {}).get("secretKeyRef"):
                wanted.setdefault(ref["name"], set()).add(ref["key"])
        for volume in spec["volumes"]:
            sources = (
                [volume] if "secret" in volume else volume.get("projected", {}).get("sources", [])
            )
            for source in (s for s in sources if "secret" in s):
                ref = source["secret"]
                name = ref.get("secretName") or ref["name"]
                keys = {i["key"] for i in ref.get("items", [])}
                wanted.setdefault(name, set()).update(keys)
    wanted.pop("streamlearn-ca")  # the CA of your servers' TLS: yours (overlays/tls)
    assert set(secrets) == set(wanted)
    for name, keys in wanted.items():
        assert keys <= set(secrets[name]), name

    services = {
        s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]}
        for s in find(objs, "Service")
    }
    for role in ROLES:
        urls = secrets[f"streamlearn-{role}"]
        for key, scheme, server in (
            ("STREAMLEARN_MQTT_URL", "mqtt", "MQTT"),
            ("STREAMLEARN_REDIS_URL", "redis", "REDIS"),
        ):
            url = re.fullmatch(rf"{scheme}://(\w+):([^@]+)@([\w.-]+):(\d+)(/0)?", urls[key])
            assert url, urls[key]
            assert url[1] == role and url[2] == passwords[f"{server}_{role.upper()}_PASSWORD"]
            assert int(url[4]) in services[url[3]]
    accounts = secrets["streamlearn-mosquitto-passwd"]["passwd"]
    assert sorted(line.split(":")[0] for line in accounts.splitlines()) == sorted(ROLES)
    acl = secrets["streamlearn-redis-acl"]["users.acl"]
    for role in ROLES:
        digest = hashlib.sha256(passwords[f"REDIS_{role.upper()}_PASSWORD"].encode()).hexdigest()
        assert f"user {role} on #{digest} " in acl
    assert secrets["streamlearn-http-token"]["token"] == "t" * 64
    for password in passwords.values():
        assert password not in done.stderr
