"""`streamlearn export`, `pin` and `unpin`: what an operator does with published versions."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from streamlearn.config.app import ModelConfig
from streamlearn.config.loading import load_config
from streamlearn.config.settings import load_settings
from streamlearn.contract.names import Names

PIN_HELP = (
    "make the actors serve version N of a model until `unpin`, while the learner goes on "
    "learning and publishing (the version is kept in Redis while pinned). To roll back, "
    "pin the version before a bad one: `streamlearn status` lists the latest; "
    "a missing version fails, naming the versions kept."
)


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the subcommands with `cli`'s `command(name, help, func)`."""
    exp = command(
        "export",
        "save a published version as a standalone Keras model (built-in layers only: "
        "keras.saving.load_model opens it without streamlearn)",
        _export,
    )
    exp.add_argument("--model", help="model name (default: the only model)")
    exp.add_argument("--version", type=int, help="version to export (default: the latest)")
    exp.add_argument(
        "--output", required=True, help="FILE.keras, a directory (savedmodel), FILE.safetensors"
    )
    exp.add_argument(
        "--format",
        choices=["keras", "savedmodel", "safetensors"],
        default="keras",
        help="keras: one .keras file; savedmodel: a TF SavedModel directory for TF Serving; "
        "safetensors: the weights as published, with the model's spec "
        "(streamlearn.online.OnlineModel.load opens it)",
    )

    pin = command("pin", PIN_HELP, _pin)
    pin.add_argument("--model", help="model name (default: the only model)")
    pin.add_argument("--version", type=int, required=True, help="the version to serve")
    pin.add_argument(
        "--label",
        help="name the version instead (`stable`): requests may then ask for "
        '`versions/stable` (HTTP) or `"version": "stable"` (MQTT); the actors go on '
        "serving the latest, and the version is kept in Redis while labelled",
    )

    unpin = command("unpin", "return the actors to the latest version", _unpin)
    unpin.add_argument("--model", help="model name (default: the only model)")
    unpin.add_argument("--label", help="remove this version label instead")


def _store(args: argparse.Namespace):
    """The model's config and its weights store, from --config and the environment."""
    from streamlearn.store import redis_client
    from streamlearn.store.weights import WeightsStore

    model: ModelConfig = load_config(args.config).model(args.model)
    settings = load_settings()
    names = Names(model.name, settings.topic_prefix, settings.key_prefix)
    client = redis_client.connect(
        settings.redis, probe_s=2, socket_timeout=10, socket_connect_timeout=5
    )
    return model, WeightsStore(client, names)


def _export(args: argparse.Namespace) -> int:
    from streamlearn.nn.export import export

    model, store = _store(args)
    done = export(model, store, args.output, args.version, args.format)
    variant = "" if done.variant == "base" else f" (variant {done.variant})"
    print(f"exported {model.name} version {done.version}{variant} to {done.path} ({done.format})")
    return 0


def _pin(args: argparse.Namespace) -> int:
    model, store = _store(args)
    if args.label is not None:
        store.label(args.label, args.version)
        print(
            f"labelled {model.name} version {args.version} {args.label!r}: requests may name "
            f"it by the label; kept until `streamlearn unpin --label {args.label}`"
        )
        return 0
    store.pin(args.version)
    latest = store.latest_version()
    print(
        f"pinned {model.name} to version {args.version} (latest {latest}): actors serve it "
        f"until `streamlearn unpin --model {model.name}`"
    )
    return 0


def _unpin(args: argparse.Namespace) -> int:
    model, store = _store(args)
    if args.label is not None:
        was = store.labels().get(args.label)
        store.label(args.label, None)
        print(f"removed label {args.label!r} of {model.name} (was version {was})")
        return 0
    was = store.unpin()
    latest = store.latest_version()
    if was is None:
        print(f"{model.name} was not pinned; actors serve the latest, version {latest}")
    else:
        print(f"unpinned {model.name} (was version {was}): actors serve the latest, {latest}")
    return 0


def pin_lines(row: dict) -> list[str]:
    """The pin of one model in `streamlearn status`, when there is one."""
    pinned = row.get("pinned_version")
    if pinned is None:
        return []
    return [
        f"  PINNED: actors serve version {pinned} (latest {row.get('latest_version', '-')}); "
        f"`streamlearn unpin --model {row['model']}` returns them to the latest"
    ]
