"""`streamlearn deploy k8s`: the Kubernetes manifests of a config's every model and
variant, written to stdout or to a folder (`streamlearn.stack.k8s`). No Secret holds a
password: the roles', the broker's and Redis's are named, and made by the user from the
deploy scripts (docs/kubernetes.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from streamlearn.errors import ConfigError, StreamlearnError


def add_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "deploy",
        help="render an install of every model for a cluster",
        description="Render a Kubernetes install of every model and variant of a config: "
        "`kubectl apply -f` what it writes (docs/kubernetes.md).",
    )
    p.add_argument("target", choices=["k8s"], help="where to: k8s (Kubernetes manifests)")
    p.add_argument("--config", help="streamlearn.toml (default: ./streamlearn.toml)")
    p.add_argument("--out", help="a folder for one file per part (default: stdout)")
    p.add_argument("--broker", action="store_true", help="with the MQTT broker (Mosquitto)")
    p.add_argument("--redis", action="store_true", help="with Redis")
    p.add_argument(
        "--monitoring",
        action="store_true",
        help="with a PodMonitor, a PrometheusRule and Grafana's dashboard ConfigMap",
    )
    p.add_argument(
        "--http-token", action="store_true", help="a bearer token on the actors' HTTP door"
    )
    p.add_argument("--tls", action="store_true", help="every role trusts the CA streamlearn-ca")
    p.add_argument("--gpu", action="store_true", help="learners on a GPU node, GPU image")
    p.add_argument("--registry", help="the images' registry, e.g. registry.example.com/team")
    p.add_argument("--tag", help="the images' tag (default: the kustomize tree's)")
    p.add_argument(
        "--actors", metavar="MIN:MAX", help="the actors' autoscaler bounds (default 2:8)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import yaml  # noqa: F401  (the deploy files are YAML)
    except ModuleNotFoundError:
        raise StreamlearnError(
            "`streamlearn deploy` reads YAML: pip install -e '.[deploy]' (or pyyaml)"
        ) from None
    from streamlearn.config.defaults import config_path
    from streamlearn.config.loading import load_config
    from streamlearn.stack.k8s import Install, render, to_yaml, write

    path = config_path(args.config)
    if path is None:
        raise ConfigError("no streamlearn.toml here: give --config")
    config = load_config(path)
    # Each option is the Install field of its name (--http-token: http_token).
    given = {f.name: getattr(args, f.name) for f in fields(Install)}
    install = Install(**{**given, "actors": _bounds(args.actors)})
    parts = render(config, Path(path).read_text(encoding="utf-8"), install)
    if args.out is None:
        sys.stdout.write(to_yaml([o for objs in parts.values() for o in objs]))
        return 0
    for written in write(parts, args.out):
        print(written, file=sys.stderr)
    return 0


def _bounds(text: str | None) -> tuple[int, int] | None:
    """`--actors MIN:MAX`.

    >>> _bounds("2:8"), _bounds(None)
    ((2, 8), None)
    """
    if text is None:
        return None
    low, sep, high = text.partition(":")
    if not (sep and low.isdigit() and high.isdigit()):
        raise ConfigError(f"--actors must be MIN:MAX, e.g. 2:8, got {text!r}")
    return int(low), int(high)
