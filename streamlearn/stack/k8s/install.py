"""A whole install, from a `streamlearn.toml`: the namespace, the config as a ConfigMap,
the namespace's NetworkPolicies, every model's roles (`roles`), and what was asked for
beside them: the broker and Redis (`servers`), the monitoring objects (`monitoring`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from streamlearn.config.app import AppConfig
from streamlearn.errors import ConfigError
from streamlearn.stack.k8s import monitoring, roles, servers
from streamlearn.stack.k8s.names import content_name, dns_name
from streamlearn.stack.k8s.templates import Obj, image_tags, load_all, load_one

CONFIG_KEY = "streamlearn.toml"  # where the roles' --config looks, in the mounted folder
# The namespace's own policies: nothing comes in to a role's pod but what they admit.
SHARED_POLICIES = ("streamlearn-default-deny-ingress", "streamlearn-metrics-from-prometheus")


@dataclass(frozen=True)
class Install:
    """What `streamlearn deploy k8s` is asked for, besides the config's models."""

    broker: bool = False
    redis: bool = False
    monitoring: bool = False
    http_token: bool = False
    tls: bool = False
    gpu: bool = False
    registry: str | None = None
    tag: str | None = None
    actors: tuple[int, int] | None = None  # the autoscaler's bounds; None: the template's

    def image(self, name: str) -> str:
        """The reference to run for one of the templates' image names."""
        tags = {
            **image_tags("k8s/common/kustomization.yaml"),
            **image_tags("k8s/overlays/gpu/kustomization.yaml"),
        }
        tag = self.tag or tags.get(name) or tags["streamlearn"]
        return f"{self.registry.rstrip('/')}/{name}:{tag}" if self.registry else f"{name}:{tag}"


def render(config: AppConfig, config_text: str, install: Install) -> dict[str, list[Obj]]:
    """The install's objects, in parts to apply in order (the namespace first)."""
    if install.actors is not None and not 1 <= install.actors[0] <= install.actors[1]:
        raise ConfigError(f"--actors must be MIN:MAX with 1 <= MIN <= MAX, got {install.actors}")
    data = {CONFIG_KEY: config_text}
    config_map: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": content_name("streamlearn-config", data),
            "namespace": roles.NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "streamlearn"},
        },
        "data": data,
    }
    policies = [
        load_one("k8s/common/network-policies.yaml", "NetworkPolicy", name)
        for name in SHARED_POLICIES
    ]
    for policy in policies:
        policy["metadata"]["namespace"] = roles.NAMESPACE
    parts = {"namespace": load_all("k8s/common/namespace.yaml"), "config": [config_map, *policies]}
    for model in config.models.values():
        parts[f"model-{dns_name(model.name)}"] = roles.model_objects(
            model,
            config_map=config_map["metadata"]["name"],
            images=install.image,
            actors=install.actors,
            http_token=install.http_token,
            tls=install.tls,
            gpu=install.gpu,
        )
    if install.broker:
        parts["broker"] = servers.broker(install.image("streamlearn-mosquitto"))
    if install.redis:
        parts["redis"] = servers.redis()
    if install.monitoring:
        parts["monitoring"] = monitoring.objects()
    _check_unique(config, parts)
    return parts


def _check_unique(config: AppConfig, parts: dict[str, list[Obj]]) -> None:
    """Two names of the config that meet in one object name (`a` with variant `b-c`, and
    `a-b` with variant `c`) would overwrite each other: refuse them."""
    seen: dict[tuple[str, str], str] = {}
    for part, objs in parts.items():
        for obj in objs:
            key = (obj["kind"], obj["metadata"]["name"])
            if key in seen:
                raise ConfigError(
                    f"models: {seen[key]} and {part} both render {key[0]} {key[1]!r}; "
                    f"rename a model or variant (models: {sorted(config.models)})"
                )
            seen[key] = part


def to_yaml(objs: list[Obj]) -> str:
    """The objects as one YAML stream, a file's text in block style (the config, the
    dashboard and each alert's expression as literal blocks)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        # PyYAML quotes instead where a literal block cannot keep the text as it is.
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(objs, Dumper=Dumper, sort_keys=False, width=100, allow_unicode=True)


def write(parts: dict[str, list[Obj]], out: str | os.PathLike[str]) -> list[Path]:
    """One file per part, numbered in apply order (`kubectl apply -f DIR` reads them so),
    in place of the numbered files of an earlier render (a model since removed)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("[0-9][0-9]-*.yaml"):
        old.unlink()
    written = []
    for i, (part, objs) in enumerate(parts.items()):
        path = folder / f"{i:02d}-{part}.yaml"
        path.write_text(to_yaml(objs), encoding="utf-8")
        written.append(path)
    return written
