"""Fixtures: real `redis-server` and `mosquitto` on free ports, and real worker processes.

Each test gets its own topic and key prefix, so tests sharing the session's servers never
see each other's messages, retained status or keys.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import paho.mqtt.client as paho
import pytest
import redis as redis_lib
from paho.mqtt.enums import CallbackAPIVersion

import streamlearn
from streamlearn import mqtt
from streamlearn.config import LearningConfig, Settings
from streamlearn.contract.names import Names
from streamlearn.stack import embedded

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# servers run with the deploy/ files (`broker`, `acl_redis`), for any test module
pytest_plugins = ["tests.deployed"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.ServerProcess]:
    with embedded.redis_server(workdir=tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def mosquitto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.ServerProcess]:
    with embedded.mosquitto(workdir=tmp_path_factory.mktemp("mosquitto")) as server:
        yield server


@pytest.fixture
def settings(
    redis_server: embedded.ServerProcess, mosquitto_server: embedded.ServerProcess
) -> Settings:
    return own_settings(redis_server, mosquitto_server)


def own_settings(redis: embedded.ServerProcess, broker: embedded.ServerProcess) -> Settings:
    """The session's servers, with a topic and key prefix of one's own."""
    tag = uuid.uuid4().hex[:8]
    return Settings(
        mqtt_url=f"mqtt://127.0.0.1:{broker.port}",
        redis_url=f"redis://127.0.0.1:{redis.port}/0",
        topic_prefix=f"t{tag}",
        key_prefix=f"k{tag}",
        share_group=f"g{tag}",
    )


@pytest.fixture
def redis(settings: Settings) -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url(settings.redis)
    yield client
    for key in client.scan_iter(f"{settings.key_prefix}:*"):
        client.delete(key)
    client.close()


def role_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    return {**env, **settings.as_env(), "PYTHONUNBUFFERED": "1"}


class RoleProcess(embedded.WatchedProcess):
    """A worker process (`python -m workers.ROLE`) run from the repository root."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv, env, cwd=ROOT)


@pytest.fixture
def start_role(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., RoleProcess]]:
    """start_role(role, toml_text, model=None, instance="0", env=None) -> a ready RoleProcess."""
    started: list[RoleProcess] = []

    def start(
        role: str,
        toml: str,
        model: str | None = None,
        instance: str = "0",
        env: dict[str, str] | None = None,
    ) -> RoleProcess:
        config = tmp_path / "streamlearn.toml"
        config.write_text(toml)
        proc = launch_role(settings, role, config, model, instance, env)
        started.append(proc)
        proc.wait_for(" ready")
        return proc

    yield start
    for proc in started:
        proc.stop()


def launch_role(
    settings: Settings,
    role: str,
    config: Path,
    model: str | None = None,
    instance: str = "0",
    env: dict[str, str] | None = None,
) -> RoleProcess:
    """`python -m workers.ROLE` with `settings`, started (wait for its " ready" line)."""
    argv = [
        sys.executable,
        "-m",
        f"streamlearn.{role}.worker",
        "--config",
        str(config),
        "--instance",
        instance,
    ]
    if model:
        argv += ["--model", model]
    return RoleProcess(argv, {**role_env(settings), **(env or {})})


class Client:
    """A device or user application: streamlearn's public client, bound to one model.

    Tests that publish requests themselves (so that an actor gets them at once) use the
    same connection, `client`, and read their replies on `reply_topic` with `wait`.
    """

    def __init__(self, settings: Settings, model: str, client_id: str | None = None) -> None:
        self.names = Names(model, settings.topic_prefix, settings.key_prefix)
        self.device = streamlearn.Client(
            settings.mqtt, topic_prefix=settings.topic_prefix, client_id=client_id
        )
        self.client = self.device.mqtt
        self.received: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()
        # Under replies/{client id}/, the one reply space a device may read.
        self.reply_topic = self.names.topic(f"replies/{self.device.client_id}/raw")
        self.client.message_callback_add(self.reply_topic, self._on_message)

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.received.append(msg)
            self._cond.notify_all()

    def publish_samples(self, payloads: list[bytes | str | dict]) -> None:
        """Publish with QoS 1 and wait for every PUBACK."""
        self.device.publish_payloads(self.names.model, payloads, timeout=30)

    def request(self, body: dict, timeout_s: float = 10) -> dict:
        """One MQTT v5 request/response round trip: the reply document, error or not."""
        try:
            return self.device.request(self.names.model, body, timeout=timeout_s)
        except TimeoutError as exc:
            raise AssertionError(str(exc)) from None

    def wait(
        self, match: Callable[[paho.MQTTMessage], bool], timeout_s: float = 10
    ) -> paho.MQTTMessage:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for msg in self.received:
                    if match(msg):
                        return msg
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no matching MQTT message within {timeout_s} s")
                self._cond.wait(remaining)

    def close(self) -> None:
        self.device.close()


@pytest.fixture
def client_for(settings: Settings) -> Iterator[Callable[..., Client]]:
    clients: list[Client] = []

    def make(model: str, **kw: Any) -> Client:
        clients.append(Client(settings, model, **kw))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


def plain_paho(settings: Settings, protocol: int = paho.MQTTv311) -> paho.Client:
    """A raw paho client (no streamlearn helper), connected, loop running."""
    addr = mqtt.BrokerAddress.parse(settings.mqtt)
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=protocol)
    client.connect(addr.host, addr.port)
    client.loop_start()
    return client


def trained(settings: Settings, names: Names) -> int:
    """Samples the model's learner has trained on, as its retained status says (0: none)."""
    status = retained(settings, names.status_topic)
    return status["samples_seen"] if status else 0


def scrape(port: int) -> str:
    """A worker's Prometheus page, from its metrics port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def sample(page: str, name: str) -> float | None:
    """The value of metric `name` (its one series) on a scraped page; None while absent."""
    found = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", page, re.MULTILINE)
    return None if found is None else float(found.group(1))


def eventually(check: Callable[[], T], timeout_s: float = 30, what: str = "condition") -> T:
    """Poll `check` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout_s} s")


def served(client: Client, body: dict, version: int, timeout_s: float = 30) -> dict:
    """The reply to `body` once it comes from `version` or a newer one: the actors swap a new
    version in within moments, which a busy machine stretches to seconds, and a learner that
    has acknowledged every sample may still publish once more (publish.min_ms later)."""

    def check() -> dict | None:
        reply = client.request(body)
        return reply if reply["version"] >= version else None

    return eventually(check, timeout_s, f"version {version} or newer served")


def retained(settings: Settings, topic: str, timeout_s: float = 2) -> dict | None:
    """The JSON document retained on `topic` (a status), read once; None when none."""
    got: list[bytes] = []
    done = threading.Event()

    def on_message(_c: object, _u: object, msg: paho.MQTTMessage) -> None:
        got.append(msg.payload)
        done.set()

    client = mqtt.connect(settings.mqtt, subscriptions=[(topic, 1)], on_message=on_message)
    try:
        done.wait(timeout_s)
    finally:
        mqtt.close(client)
    return json.loads(got[-1]) if got and got[-1] else None


def published(client: redis_lib.Redis, names: Names) -> tuple[int, dict[str, str]]:
    """The model's latest version and its blob's metadata ((0, {}) before any)."""
    from streamlearn.store.weights import WeightsStore

    return WeightsStore(client, names).metadata()


def samples_seen(client: redis_lib.Redis, names: Names) -> int:
    """How many samples the learner had seen in the latest version (0 before any)."""
    return int(published(client, names)[1].get("samples_seen", 0))


def settled(settings: Settings, redis: redis_lib.Redis, names: Names, samples: int) -> bool:
    """Whether the learner of `names` trained on `samples` samples, spent its replay budget
    on them and published all it learned: it stays idle until more samples come."""
    status = retained(settings, names.status_topic)
    if status is None or status["samples_seen"] < samples:
        return False
    budget = status["replayed_samples"] >= samples * LearningConfig().replay_ratio - 256
    latest = int(redis.get(names.latest_key) or 0)
    return budget and status["unpublished_steps"] == 0 and status["version"] == latest
