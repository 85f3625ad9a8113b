"""Fixtures: real `redis-server` and `mosquitto` on free ports, and real worker processes.

Each test gets its own topic and key prefix, so tests sharing the session's servers never
see each other's messages, retained status or keys.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
import redis as redis_lib
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn import embedded, mqtt
from streamlearn.config import Settings
from streamlearn.names import Names

ROOT = Path(__file__).resolve().parents[1]

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
    tag = uuid.uuid4().hex[:8]
    return Settings(
        mqtt_url=f"mqtt://127.0.0.1:{mosquitto_server.port}",
        redis_url=f"redis://127.0.0.1:{redis_server.port}/0",
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
        argv = [
            sys.executable,
            "-m",
            f"workers.{role}",
            "--config",
            str(config),
            "--instance",
            instance,
        ]
        if model:
            argv += ["--model", model]
        proc = RoleProcess(argv, {**role_env(settings), **(env or {})})
        started.append(proc)
        proc.wait_for(" ready")
        return proc

    yield start
    for proc in started:
        proc.stop()


class Client:
    """A plain paho MQTT v5 client, as a device or user application would use."""

    def __init__(self, settings: Settings, model: str, client_id: str | None = None) -> None:
        self.names = Names(model, settings.topic_prefix, settings.key_prefix)
        self.received: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()
        client_id = client_id or f"sl-test-{uuid.uuid4().hex[:8]}"
        # Replies go to replies/{client id}/..., the one reply topic a device may read.
        self.reply_topic = self.names.topic(f"replies/{client_id}/{uuid.uuid4().hex[:8]}")
        self.client = mqtt.connect(
            settings.mqtt,
            client_id,
            subscriptions=[(self.reply_topic, 1)],
            on_message=self._on_message,
        )

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.received.append(msg)
            self._cond.notify_all()

    def publish_samples(self, payloads: list[bytes | str | dict]) -> None:
        """Publish with QoS 1 and wait for every PUBACK."""
        infos = [
            self.client.publish(
                self.names.samples_topic, json.dumps(p) if isinstance(p, dict) else p, qos=1
            )
            for p in payloads
        ]
        for info in infos:
            info.wait_for_publish(30)
            assert info.is_published()

    def request(self, body: dict, timeout_s: float = 10) -> dict:
        """One MQTT v5 request/response round trip; the reply must echo the correlation."""
        correlation = uuid.uuid4().bytes
        self.client.publish(
            self.names.predict_topic,
            json.dumps(body),
            qos=1,
            properties=mqtt.request_properties(self.reply_topic, correlation),
        )
        msg = self.wait(lambda m: m.properties.CorrelationData == correlation, timeout_s)
        return json.loads(msg.payload)

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
        mqtt.close(self.client)


@pytest.fixture
def client_for(settings: Settings) -> Iterator[Callable[[str], Client]]:
    clients: list[Client] = []

    def make(model: str) -> Client:
        clients.append(Client(settings, model))
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


def eventually(check: Callable[[], bool], timeout_s: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout_s} s")
