"""The servers an install may bring along: the MQTT broker (`--broker`: the guard image of
`deploy/mosquitto/Dockerfile` with compose's `mosquitto.conf` and `acl`) and Redis
(`--redis`: `redis:7` with compose's `redis.conf`). Each is a StatefulSet of one with a
volume, a Service, and a NetworkPolicy that admits the roles alone (and, to the broker's
TLS listener, the devices). The files the scripts write are Secrets the user creates:
`passwd` (`make-passwd.sh`), the TLS files (`make-certs.sh`), `users.acl` (`make-acl.sh`).
"""

from __future__ import annotations

from typing import Any

from streamlearn.stack.k8s.names import content_name
from streamlearn.stack.k8s.roles import NAMESPACE
from streamlearn.stack.k8s.templates import Obj, compose_service, deploy_file, probe_command

# Secrets the user creates from the scripts' files (docs/kubernetes.md).
BROKER_PASSWD = "streamlearn-mosquitto-passwd"
BROKER_CERTS = "streamlearn-mosquitto-certs"
REDIS_ACL = "streamlearn-redis-acl"
# The roles' pods: every one, and nothing else, carries this label.
ROLES_PEER = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "streamlearn"}}}
# Any address: the devices, from wherever the broker's TLS port is published.
ANYWHERE = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]


def broker(image: str) -> list[Obj]:
    """Mosquitto with the guard plugin: 1883 for the roles, 8883 (TLS) for devices, the
    latter also on a LoadBalancer Service of its own."""
    config = _config_map(
        "mosquitto-config", {f: f"mosquitto/{f}" for f in ("mosquitto.conf", "acl")}
    )
    name = "mosquitto"
    volumes = [
        _projected(
            "config", config, {"mosquitto.conf": None, "acl": None}, BROKER_PASSWD, "passwd"
        ),
        {"name": "certs", "secret": {"secretName": BROKER_CERTS, "defaultMode": 0o440}},
    ]
    mounts: list[Obj] = [
        {"name": "config", "mountPath": "/mosquitto/config", "readOnly": True},
        {"name": "certs", "mountPath": "/mosquitto/certs", "readOnly": True},
        {"name": "data", "mountPath": "/mosquitto/data"},
    ]
    objs = _server(
        name,
        "broker",
        image=image,
        uid=1883,
        ports={"mqtt": 1883, "mqtts": 8883},
        volumes=volumes,
        mounts=mounts,
        ready=probe_command(compose_service("mosquitto")),  # up, refusing anonymous clients
        storage="5Gi",
        # mosquitto.conf's memory_limit (3 GiB) binds before the container's limit.
        resources={
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "4Gi"},
        },
    )
    devices = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta("mosquitto-devices", "broker"),
        "spec": {
            "type": "LoadBalancer",
            "selector": _labels(name, "broker"),
            "ports": [{"name": "mqtts", "port": 8883, "targetPort": "mqtts"}],
        },
    }
    policy = _policy(name, "broker", [{"from": [ROLES_PEER], "ports": _tcp(1883)}])
    policy["spec"]["ingress"].append({"from": ANYWHERE, "ports": _tcp(8883)})
    return [config, *objs, devices, policy]


def redis() -> list[Obj]:
    """Redis 7 with AOF on a volume, its ACL file from the Secret `REDIS_ACL`."""
    config = _config_map("redis-config", {"redis.conf": "redis/redis.conf"})
    volumes = [_projected("config", config, {"redis.conf": None}, REDIS_ACL, "users.acl")]
    mounts: list[Obj] = [
        {"name": "config", "mountPath": "/usr/local/etc/redis", "readOnly": True},
        {"name": "data", "mountPath": "/data"},
    ]
    compose = compose_service("redis")
    objs = _server(
        "redis",
        "redis",
        image=compose["image"],
        uid=999,
        ports={"redis": 6379},
        volumes=volumes,
        mounts=mounts,
        args=compose["command"],
        ready=probe_command(compose),  # up, answering NOAUTH to a stranger
        storage="10Gi",
        # redis.conf's maxmemory (2 GB) with room for the AOF rewrite's fork.
        resources={
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "3Gi"},
        },
    )
    policy = _policy("redis", "redis", [{"from": [ROLES_PEER], "ports": _tcp(6379)}])
    return [config, *objs, policy]


def _server(
    name: str,
    component: str,
    *,
    image: str,
    uid: int,
    ports: dict[str, int],
    volumes: list[Obj],
    mounts: list[Obj],
    ready: list[str],
    storage: str,
    resources: Obj,
    args: list[str] | None = None,
) -> list[Obj]:
    """A server's Service and StatefulSet of one: the roles' pod security (the namespace
    enforces `restricted`), its data on a volume claim of its own."""
    labels = _labels(name, component)
    first = next(iter(ports))
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        **({"args": args} if args else {}),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports.items()],
        "readinessProbe": {
            "exec": {"command": ready},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "livenessProbe": {"tcpSocket": {"port": first}, "periodSeconds": 15, "failureThreshold": 4},
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    pod = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,  # compose: stop_grace_period, a clean save
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, component),
        "spec": {
            "type": "ClusterIP",
            "selector": labels,
            "ports": [{"name": n, "port": p, "targetPort": n} for n, p in ports.items()],
        },
    }
    claim = {
        "metadata": {"name": "data", "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }
    workload = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, component),
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
            "volumeClaimTemplates": [claim],
        },
    }
    return [service, workload]


def _labels(name: str, component: str) -> dict[str, str]:
    # Not `app.kubernetes.io/part-of: streamlearn`: the roles' policies select by that.
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component}


def _meta(name: str, component: str) -> Obj:
    return {"name": name, "namespace": NAMESPACE, "labels": _labels(name, component)}


def _tcp(port: int) -> list[Obj]:
    return [{"protocol": "TCP", "port": port}]


def _policy(name: str, component: str, ingress: list[Obj]) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, component),
        "spec": {
            "podSelector": {"matchLabels": _labels(name, component)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def _config_map(name: str, files: dict[str, str]) -> Obj:
    """The deploy files as a ConfigMap named after their content: a change rolls the pod."""
    data = {key: deploy_file(path).read_text() for key, path in files.items()}
    server = name.split("-")[0]
    meta = {"name": content_name(name, data), "namespace": NAMESPACE}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "labels": {"app.kubernetes.io/name": server}},
        "data": data,
    }


def _projected(volume: str, config: Obj, keys: dict[str, None], secret: str, key: str) -> Obj:
    """One folder of the ConfigMap's files and the Secret's `key` (0440: the pod's group)."""
    return {
        "name": volume,
        "projected": {
            "defaultMode": 0o440,
            "sources": [
                {
                    "configMap": {
                        "name": config["metadata"]["name"],
                        "items": [{"key": k, "path": k} for k in keys],
                    }
                },
                {"secret": {"name": secret, "items": [{"key": key, "path": key}]}},
            ],
        },
    }
