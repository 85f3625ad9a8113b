"""The source tree's deploy files, read as the install's templates: every role's objects
come from `deploy/k8s` (the kustomize tree), the servers' files from `deploy/mosquitto` and
`deploy/redis`, the alerts and the dashboard from `deploy/prometheus` and `deploy/grafana`.
Nothing is written twice: a change there changes both the kustomize tree and this install.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from streamlearn.errors import StreamlearnError

Obj = dict[str, Any]

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
COMPOSE = DEPLOY.parent / "compose.yaml"


def deploy_file(relative: str) -> Path:
    """A file of the source tree's deploy/ (a checkout's, not the wheel's)."""
    path = DEPLOY / relative
    if not path.is_file():
        raise StreamlearnError(
            f"{path} is missing: `streamlearn deploy` renders from a source checkout's deploy/"
        )
    return path


def load_all(relative: str) -> list[Obj]:
    """The YAML documents of a deploy file, each a fresh copy to change."""
    import yaml

    return [doc for doc in yaml.safe_load_all(deploy_file(relative).read_text()) if doc]


def load_one(relative: str, kind: str, name: str | None = None) -> Obj:
    """The one object of `kind` (and `name`) in a deploy file."""
    found = [
        o
        for o in load_all(relative)
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    if len(found) != 1:
        raise StreamlearnError(f"deploy/{relative}: expected one {kind} {name or ''}")
    return found[0]


def compose_service(name: str) -> Obj:
    """A service of compose.yaml: the servers run as compose runs them."""
    import yaml

    if not COMPOSE.is_file():
        raise StreamlearnError(
            f"{COMPOSE} is missing: `streamlearn deploy` renders from a checkout"
        )
    service: Obj = yaml.safe_load(COMPOSE.read_text())["services"][name]
    return service


def probe_command(service: Obj) -> list[str]:
    """A compose service's healthcheck as an exec probe's command.

    >>> probe_command({"healthcheck": {"test": ["CMD-SHELL", "echo $$HOME"]}})
    ['sh', '-c', 'echo $HOME']
    """
    test = service["healthcheck"]["test"]
    if test[0] == "CMD-SHELL":  # compose writes a `$` as `$$`
        return ["sh", "-c", test[1].replace("$$", "$")]
    return list(test[1:])


def image_tags(relative: str) -> dict[str, str]:
    """A kustomization's `images:`: name -> tag."""
    [kustomization] = load_all(relative)
    return {i["name"]: str(i["newTag"]) for i in kustomization.get("images", [])}


def merged(base: Any, patch: Any) -> Any:
    """`patch` laid over `base` as kubectl's strategic merge does for what the overlays
    patch: maps key by key, lists of named items name by name, anything else replaced.

    >>> merged({"env": [{"name": "A", "value": "1"}], "args": ["x"]},
    ...        {"env": [{"name": "B", "value": "2"}], "args": ["y"]})
    {'env': [{'name': 'A', 'value': '1'}, {'name': 'B', 'value': '2'}], 'args': ['y']}
    """
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merged(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        out_list = list(base)
        where = {item["name"]: i for i, item in enumerate(base)}
        for item in patch:
            if item["name"] in where:
                out_list[where[item["name"]]] = merged(base[where[item["name"]]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def patch_workload(workload: Obj, relative: str) -> Obj:
    """An overlay's strategic-merge patch of a workload (its `spec`), laid over `workload`."""
    [patch] = load_all(relative)
    return {**workload, "spec": merged(workload["spec"], patch["spec"])}
