"""A model's roles, stamped from the kustomize tree's objects (`deploy/k8s/common`,
`deploy/k8s/base`): ingest (its StatefulSet and headless Service), the actors (Deployment,
autoscaler, disruption budget, Service, and the NetworkPolicy of their doors) and one
learner per variant (StatefulSet of one, headless Service, volume claim). Each object gets
the model's name (`names.dns_name`) and labels, each container `--model` (and `--variant`).
The opt-in overlays (`http-token`, `tls`, `gpu`) are laid over them from their own files.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable

from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.errors import ConfigError
from streamlearn.stack.k8s.names import dns_name
from streamlearn.stack.k8s.templates import Obj, load_all, load_one, patch_workload

NAMESPACE = "streamlearn"
MODEL_LABEL = "streamlearn/model"
VARIANT_LABEL = "streamlearn/variant"
WORKLOADS = ("Deployment", "StatefulSet")
# What an actor on TensorFlow needs (docs/kubernetes.md: about 730 MiB resident).
TENSORFLOW_MEMORY = {"requests": "1Gi", "limits": "2Gi"}

# image name (the templates') -> the reference to run
Images = Callable[[str], str]


def model_objects(
    model: ModelConfig,
    *,
    config_map: str,
    images: Images,
    actors: tuple[int, int] | None = None,
    http_token: bool = False,
    tls: bool = False,
    gpu: bool = False,
) -> list[Obj]:
    """Every object of one model's roles."""
    labels = {MODEL_LABEL: dns_name(model.name)}
    ingest = _stamped(load_all("k8s/common/ingest.yaml"), dns_name("ingest", model.name), labels)
    patches = [_TLS.format("ingest")] if tls else []
    objs = _role(ingest, config_map, ["--model", model.name], *patches)
    _image(objs, images("streamlearn"))
    objs += _actor(model, labels, config_map, images, actors, http_token=http_token, tls=tls)
    for variant in model.variant_names:
        objs += _learner(model, variant, labels, config_map, images, tls=tls, gpu=gpu)
    return objs


def _actor(
    model: ModelConfig,
    labels: dict[str, str],
    config_map: str,
    images: Images,
    actors: tuple[int, int] | None,
    *,
    http_token: bool,
    tls: bool,
) -> list[Obj]:
    name = dns_name("actor", model.name)
    objs = _stamped(load_all("k8s/common/actor.yaml"), name, labels)
    patches = [p for p, on in ((_TOKEN, http_token), (_TLS.format("actor"), tls)) if on]
    objs = _role(objs, config_map, ["--model", model.name], *patches)
    doors = _doors(model)
    tensorflow = _needs_tensorflow(model)
    _image(objs, images("streamlearn" if tensorflow else "streamlearn-actor"))
    for obj in objs:
        if obj["kind"] == "Service":
            obj["spec"]["ports"] = _open(obj["spec"]["ports"], doors, "port")
        elif obj["kind"] == "HorizontalPodAutoscaler" and actors is not None:
            obj["spec"]["minReplicas"], obj["spec"]["maxReplicas"] = actors
        elif obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            [c] = pod["containers"]
            c["ports"] = _open(c["ports"], doors, "containerPort")
            if tensorflow:
                for kind, memory in TENSORFLOW_MEMORY.items():
                    c["resources"][kind]["memory"] = memory
            # The preStop sleep, then the model's drain_s: the grace period outlasts both.
            sleep = float(c["lifecycle"]["preStop"]["exec"]["command"][1])
            pod["terminationGracePeriodSeconds"] = max(
                pod["terminationGracePeriodSeconds"], math.ceil(sleep + model.actor.drain_s) + 10
            )
    if doors:
        policy = load_one("k8s/common/network-policies.yaml", "NetworkPolicy", "actor-http")
        [policy] = _stamped([policy], dns_name("actor-http", model.name), labels)
        policy["spec"]["podSelector"]["matchLabels"].update(labels)
        [rule] = policy["spec"]["ingress"]
        rule["ports"] = [{"protocol": "TCP", "port": port} for port in doors.values()]
        objs.append(policy)
    return objs


def _learner(
    model: ModelConfig,
    variant: str,
    labels: dict[str, str],
    config_map: str,
    images: Images,
    *,
    tls: bool,
    gpu: bool,
) -> list[Obj]:
    learns = model.variant(variant)
    field = f"models.{model.name}" + ("" if variant == BASE_VARIANT else f".variants.{variant}")
    if learns.learner.distribute == "multi_worker":
        raise ConfigError(
            f"{field}.learner.distribute: 'multi_worker' runs as an Indexed Job, which "
            "`streamlearn deploy k8s` does not render: use deploy/k8s/overlays/multi-worker"
        )
    parts = ("learner", model.name) if variant == BASE_VARIANT else ("learner", model.name, variant)
    name = dns_name(*parts)
    args = ["--model", model.name] + ([] if variant == BASE_VARIANT else ["--variant", variant])
    stamp = {**labels, VARIANT_LABEL: dns_name(variant)}
    patches = [p for p, on in ((_TLS.format("learner"), tls), (_GPU, gpu)) if on]
    objs = _role(
        _stamped(load_all("k8s/base/learner.yaml"), name, stamp), config_map, args, *patches
    )
    _image(objs, images("streamlearn-gpu" if gpu else "streamlearn"))
    claim = dns_name(*parts, "checkpoints")
    for obj in objs:
        if obj["kind"] == "PersistentVolumeClaim":
            obj["metadata"]["name"] = claim
        elif obj["kind"] == "StatefulSet":
            for volume in obj["spec"]["template"]["spec"]["volumes"]:
                if "persistentVolumeClaim" in volume:
                    volume["persistentVolumeClaim"]["claimName"] = claim
    return objs


_TOKEN = "k8s/overlays/http-token/actor-token.yaml"
_TLS = "k8s/overlays/tls/{}-ca.yaml"
_GPU = "k8s/overlays/gpu/learner-gpu.yaml"


def _stamped(objs: list[Obj], name: str, labels: dict[str, str]) -> list[Obj]:
    """The template's objects under `name`, in the namespace, selecting by `labels` too."""
    for obj in objs:
        meta, spec, kind = obj["metadata"], obj["spec"], obj["kind"]
        meta["name"], meta["namespace"] = name, NAMESPACE
        meta.setdefault("labels", {}).update(labels)
        if kind == "Service":
            spec["selector"].update(labels)
        elif kind in (*WORKLOADS, "PodDisruptionBudget"):
            spec["selector"]["matchLabels"].update(labels)
        elif kind == "HorizontalPodAutoscaler":
            spec["scaleTargetRef"]["name"] = name
        if kind == "StatefulSet":
            spec["serviceName"] = name
        if kind in WORKLOADS:
            template = spec["template"]
            template["metadata"]["labels"].update(labels)
            for spread in template["spec"].get("topologySpreadConstraints", []):
                spread["labelSelector"]["matchLabels"].update(labels)
    return objs


def _role(objs: list[Obj], config_map: str, args: list[str], *patches: str) -> list[Obj]:
    """The workload with the config's ConfigMap, its model's arguments and the patches."""
    out = []
    for obj in objs:
        if obj["kind"] in WORKLOADS:
            for patch in patches:
                obj = patch_workload(obj, patch)
            pod = obj["spec"]["template"]["spec"]
            for volume in pod["volumes"]:
                if "configMap" in volume:
                    volume["configMap"]["name"] = config_map
            for c in pod["containers"]:
                c["args"] = [*c["args"], *args]
        out.append(obj)
    return out


def _image(objs: list[Obj], image: str) -> None:
    for obj in objs:
        if obj["kind"] in WORKLOADS:
            for c in obj["spec"]["template"]["spec"]["containers"]:
                c["image"] = image


def _doors(model: ModelConfig) -> dict[str, int]:
    """The actor's doors the config opens (port name -> port), each reachable from a
    Service: a fixed port on every address."""
    doors = {}
    actor = model.actor
    for door, port, host in (
        ("http", actor.http_port, actor.http_host),
        ("grpc", actor.grpc_port, actor.grpc_host),
    ):
        if port is None:
            continue
        field = f"models.{model.name}.actor.{door}"
        if port == 0:
            raise ConfigError(f"{field}_port: a Service needs a fixed port, got 0 (any free port)")
        if ipaddress.ip_address(host).is_loopback:
            raise ConfigError(
                f"{field}_host: a Service reaches the actor only on every address "
                f'("0.0.0.0"), got {host!r}'
            )
        doors[door] = port
    return doors


def _open(ports: list[Obj], doors: dict[str, int], key: str) -> list[Obj]:
    """The template's ports (`key`: their number) less the doors the config keeps shut,
    each open door on its configured port; `metrics` always."""
    return [
        {**p, key: doors[p["name"]]} if p["name"] in doors else p
        for p in ports
        if p["name"] in doors or p["name"] == "metrics"
    ]


def _needs_tensorflow(model: ModelConfig) -> bool:
    """Whether the actor runs TensorFlow: asked for, or a factory's model to serve (any
    variant's: the champion may be any)."""
    if model.actor.runtime != "auto":
        return model.actor.runtime == "tensorflow"
    return any(model.variant(v).factory for v in model.variant_names)
