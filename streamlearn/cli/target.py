"""Which model and broker `publish` and `predict` talk to.

The model: the one the local config names (with the service, validated by
`streamlearn.config`; with the base install alone, its name, inputs, target and
categorical values read with `tomllib`: `LightModel`); where no local config names it,
the one whose learner's retained status the broker holds (contract §2.4, `inputs`: every
device may read it), so a client-only install in an empty folder reaches a running stack;
the demo model where neither has one. The broker: the client resolves it
(`STREAMLEARN_MQTT_URL`, else the run file of `streamlearn up`, else the local default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamlearn.config import environment, runfile
from streamlearn.config.defaults import DEMO_TOML, config_path
from streamlearn.errors import ConfigError

if TYPE_CHECKING:
    from streamlearn.client.client import Client
    from streamlearn.config.app import ModelConfig

MQTT_URL_ENV = environment.MQTT_URL
MAX_PUBLISHED = 1000  # models read from the broker's statuses, at most (a hostile broker's)


@dataclass(frozen=True)
class LightModel:
    """A model as the client tools see it: its name, its inputs per sample, and with named
    inputs their names, the label's field and the fields that carry strings."""

    name: str
    inputs: int
    fields: tuple[str, ...] | None = None
    target: str = "y"
    categorical: dict[str, tuple[str, ...]] = field(default_factory=dict)


def model(config: str | None, name: str | None) -> LightModel:
    """The named model (or the only one) of `config`, `$STREAMLEARN_CONFIG` or
    `./streamlearn.toml`; the demo model when there is none."""
    models = tables(config_path(config))
    if name is None and len(models) != 1:
        raise ConfigError(f"several models configured, pick one with --model: {list(models)}")
    name = name or next(iter(models))
    if name not in models:
        raise ConfigError(f"no model {name!r} in the config; known: {list(models)}")
    return from_table(name, models[name])


def tables(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The model tables of the config at `path`; the demo's for None."""
    try:
        text = DEMO_TOML if path is None else Path(path).read_text(encoding="utf-8")
        models = tomllib.loads(text).get("models", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    if not isinstance(models, dict):
        raise ConfigError(f"{path}: [models] must be a table of model tables")
    return models


def from_table(name: str, table: Any) -> LightModel:
    """A model's table of `streamlearn.toml`, or the `inputs` of its learner's status
    (contract §2.4: the same keys), as the client tools need it; ConfigError if malformed."""
    if not isinstance(table, dict):
        raise ConfigError(f"models.{name}: a table expected, got {type(table).__name__}")
    inputs = table.get("inputs")
    width = len(inputs) if isinstance(inputs, list) else inputs
    if not isinstance(width, int) or width < 1:
        raise ConfigError(f"models.{name}.inputs: a count or a list of names, got {inputs!r}")
    if not isinstance(inputs, list):
        return LightModel(name, width)
    if not all(isinstance(n, str) and n for n in inputs):
        raise ConfigError(f"models.{name}.inputs: names are non-empty strings, got {inputs!r}")
    target = table.get("target", "y")
    categorical = table.get("categorical", {})
    if not isinstance(target, str) or not isinstance(categorical, dict):
        raise ConfigError(f"models.{name}: target is a name and categorical a table")
    values = {str(k): tuple(map(str, v)) for k, v in categorical.items() if isinstance(v, list)}
    return LightModel(name, width, tuple(inputs), target, values)


def published(client: Any, prefix: str, quiet_s: float = 0.5, most_s: float = 5.0) -> dict:
    """The models whose learner holds a retained status on the broker (contract §2.4,
    which every device may read), by name: each status's `inputs`, for `from_table`.
    `client`: a connected paho client. A broker sends retained messages right after the
    subscription's acknowledgement, with no end mark: the read ends after `quiet_s`
    without one (at most `most_s`, `MAX_PUBLISHED` models)."""
    found: dict[str, Any] = {}
    arrived = threading.Event()
    topic = f"{prefix}/+/status"

    def on_status(_c: object, _u: object, msg: Any) -> None:
        try:
            doc = json.loads(msg.payload)
        except ValueError:
            return  # not a status: nothing to learn from it
        name = msg.topic[len(prefix) + 1 : -len("/status")]
        if isinstance(doc, dict) and "inputs" in doc and len(found) < MAX_PUBLISHED:
            found[name] = doc["inputs"]
        arrived.set()

    client.message_callback_add(topic, on_status)
    try:
        client.subscribe(topic, qos=1)
        end = time.monotonic() + most_s
        while arrived.wait(quiet_s) and time.monotonic() < end:
            arrived.clear()
    finally:
        client.unsubscribe(topic)
        client.message_callback_remove(topic)
    return found


def choose(name: str | None, local: list[str], on_broker: dict, demo: bool) -> LightModel | None:
    """The model a command talks to when no local config names it: the broker's of that
    name, or its only one. With `demo` (no config file: `local` is the demo's), None for
    the demo model when it is the one asked for, or the broker holds no other. ConfigError
    naming what the config and the broker know, otherwise."""
    if demo and (name in local or (name is None and set(on_broker) <= set(local))):
        return None  # the demo, as the local config has it: whole, with the service
    if name is None and len(on_broker) == 1:
        name = next(iter(on_broker))
    if name is not None and name in on_broker:
        return from_table(name, on_broker[name])
    known = f"the config has {local}; the broker holds a status for {sorted(on_broker)}"
    if name is None:
        raise ConfigError(f"several models, pick one with --model: {known}")
    raise ConfigError(f"no model {name!r}: {known}")


def which_stack() -> str:
    """The line the client tools print on stderr: which broker, and why that one."""
    given = os.environ.get(MQTT_URL_ENV) or None
    stack = None if given else runfile.live()
    url = given or (stack.mqtt_url if stack else "mqtt://localhost:1883")
    return runfile.describe(given, stack, url, MQTT_URL_ENV)


def target(args: argparse.Namespace, service: bool) -> tuple[ModelConfig | LightModel, Client]:
    """The model and a connected client for `publish` and `predict` (`service`: the
    service extra is installed, so the config is validated whole). The line that says
    which broker, and why, goes to stderr."""
    from streamlearn.client.client import Client

    client_id = getattr(args, "client_id", None)  # `predict --client-id`
    path = config_path(args.config)
    found: ModelConfig | LightModel | None = None
    if not service:
        names = list(tables(path))
        if path is not None and _names(args.model, names):
            found = model(args.config, args.model)
        print(which_stack(), file=sys.stderr)
        client = Client(client_id=client_id)
    else:
        from streamlearn.config.loading import load_config
        from streamlearn.config.settings import load_settings

        cfg = load_config(args.config)
        names = list(cfg.models)
        if path is not None and _names(args.model, names):
            found = cfg.model(args.model)
        settings = load_settings()
        print(settings.which_stack(), file=sys.stderr)
        # With an account (deploy: one per device) the client's id is its username, and its
        # requests and replies stay in what the broker lets that device use.
        client = Client(
            settings.mqtt,
            ca_file=settings.mqtt_ca_file,
            topic_prefix=settings.topic_prefix,
            client_id=client_id,
        )
    if found is not None:
        return found, client
    try:
        on_broker = published(client.mqtt, client.topic_prefix)
        found = choose(args.model, names, on_broker, demo=path is None)
        if found is None:  # the demo model, as the local (demo) config has it
            found = model(None, args.model) if not service else cfg.model(args.model)
    except BaseException:
        client.close()
        raise
    return found, client


def _names(name: str | None, models: list[str]) -> bool:
    """Whether a config of `models` names the model asked for (or its only one)."""
    return name in models or (name is None and len(models) == 1)
